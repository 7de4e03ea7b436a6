/*
 * The one intrusive doubly linked list of the library. A struct psc_list is
 * either a list head or a link inside an element; each link field says in a
 * comment which list it belongs to.
 */
#ifndef PSC_LIST_H
#define PSC_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct psc_list {
    struct psc_list *next;
    struct psc_list *prev;
};

#define PSC_LIST_HEAD_INIT(name) { &(name), &(name) }

#define psc_container_of(ptr, type, member)                                    \
    ((type *)((char *)(ptr)-offsetof(type, member)))

#define psc_list_entry(ptr, type, member) psc_container_of(ptr, type, member)

static inline void psc_list_init(struct psc_list *head)
{
    head->next = head;
    head->prev = head;
}

static inline bool psc_list_empty(const struct psc_list *head)
{
    return head->next == head;
}

static inline void psc_list_insert_(struct psc_list *item,
                                    struct psc_list *prev,
                                    struct psc_list *next)
{
    next->prev = item;
    item->next = next;
    item->prev = prev;
    prev->next = item;
}

static inline void psc_list_add_tail(struct psc_list *item,
                                     struct psc_list *head)
{
    psc_list_insert_(item, head->prev, head);
}

static inline void psc_list_add_head(struct psc_list *item,
                                     struct psc_list *head)
{
    psc_list_insert_(item, head, head->next);
}

/* Unlink `item` and leave it as an empty list, so a second del is harmless. */
static inline void psc_list_del(struct psc_list *item)
{
    item->next->prev = item->prev;
    item->prev->next = item->next;
    psc_list_init(item);
}

/* True when a link initialised with psc_list_init() is in no list. */
static inline bool psc_list_unlinked(const struct psc_list *item)
{
    return item->next == item;
}

static inline size_t psc_list_count(const struct psc_list *head)
{
    size_t n = 0;
    for (const struct psc_list *p = head->next; p != head; p = p->next) n++;
    return n;
}

#define psc_list_first(head, type, member)                                     \
    (psc_list_empty(head) ? NULL : psc_list_entry((head)->next, type, member))

#define psc_list_for_each(pos, head)                                           \
    for (pos = (head)->next; pos != (head); pos = pos->next)

/* Iteration that allows the current element to be unlinked. */
#define psc_list_for_each_safe(pos, tmp, head)                                 \
    for (pos = (head)->next, tmp = pos->next; pos != (head);                   \
         pos = tmp, tmp = pos->next)

#endif
