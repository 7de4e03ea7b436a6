/*
 * Output for --tag-output: whole lines, a line written in pieces, a last
 * line without a newline, and stderr.
 *   t_output NAPPS
 */
#include "tclient.h"

int main(int argc, char **argv)
{
    t_init(argc, argv, 30);
    printf("out line one of %u:%u\n", t_appnum, t_arank);
    fflush(stdout);
    printf("out in ");
    fflush(stdout);
    usleep(50000);
    printf("two pieces %u:%u\n", t_appnum, t_arank);
    fprintf(stderr, "err line of %u:%u\n", t_appnum, t_arank);
    printf("no newline at the end %u:%u", t_appnum, t_arank);
    fflush(stdout);
    t_finalize();
    return 0;
}
