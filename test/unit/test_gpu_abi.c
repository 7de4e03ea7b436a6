/*
 * A program built for a CUDA-aware pscom (PSCOM_CUDA_AWARENESS) against this
 * library, which has no CUDA support: the functions pscom.h declares for it
 * are exported and answer "host memory", and pscom_init refuses the
 * program's CUDA ABI with a clear error instead of running it wrongly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "pscom.h"

static void memcpy_is_exported(void **state)
{
    char src[64], dst[64];

    (void)state;
    for (size_t i = 0; i < sizeof(src); i++) src[i] = (char)(i * 7 + 1);
    memset(dst, 0, sizeof(dst));
    pscom_memcpy(dst, src, sizeof(src));
    assert_memory_equal(dst, src, sizeof(src));
}

static void no_gpu_memory(void **state)
{
    int on_stack = 0;
    static int in_data;

    (void)state;
    assert_int_equal(pscom_is_gpu_mem(&on_stack), 0);
    assert_int_equal(pscom_is_gpu_mem(&in_data), 0);
    assert_int_equal(pscom_is_gpu_mem(NULL), 0);
    assert_int_equal(pscom_is_cuda_enabled(), 0);
}

static void cuda_abi_refused(void **state)
{
    (void)state;
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_ERR_UNSUPPORTED_VERSION);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(memcpy_is_exported),
        cmocka_unit_test(no_gpu_memory),
        cmocka_unit_test(cuda_abi_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
