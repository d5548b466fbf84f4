/* test_comm.c -- the MPI communicator (src/comm/mpi.c) on any number of ranks: all-reduce (f32,
 * i32), all-gather, gather, broadcast, barrier, all-to-all-v with uneven and zero counts, send/recv
 * around a ring. Expected values are computed locally from each rank's deterministic inputs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "comm/comm.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sits_comm_t *g_c;

static float val(int rank, int i) { return (float)((rank + 1) * 1000 + i) * 0.25f; }

static void test_allreduce_gather_bcast(void **state)
{
    int R = g_c->size, me = g_c->rank;
    enum { N = 1001 };
    float f[N];
    int32_t n32[N];
    for (int i = 0; i < N; i++) { f[i] = val(me, i); n32[i] = me * 7 + i; }
    assert_int_equal(g_c->ops->allreduce_sum(g_c, f, N, SITS_DT_F32), SITS_OK);
    assert_int_equal(g_c->ops->allreduce_sum(g_c, n32, N, SITS_DT_I32), SITS_OK);
    for (int i = 0; i < N; i++) {
        float want = 0;
        int32_t want32 = 0;
        for (int r = 0; r < R; r++) { want += val(r, i); want32 += r * 7 + i; }
        assert_true(f[i] == want);  /* small integers times 0.25: exact in fp32 */
        assert_int_equal(n32[i], want32);
    }
    int32_t mine[3] = { me, me * 2, me * 3 }, *all = malloc(sizeof(int32_t) * 3 * (size_t)R);
    assert_int_equal(g_c->ops->allgather(g_c, mine, all, sizeof mine), SITS_OK);
    for (int r = 0; r < R; r++) assert_int_equal(all[3 * r + 2], r * 3);
    memset(all, 0xff, sizeof(int32_t) * 3 * (size_t)R);
    int root = R - 1;
    assert_int_equal(g_c->ops->gather(g_c, mine, all, sizeof mine, root), SITS_OK);
    if (me == root)
        for (int r = 0; r < R; r++) assert_int_equal(all[3 * r + 1], r * 2);
    char msg[16] = "";
    if (me == 0) snprintf(msg, sizeof msg, "plan-%d", R);
    assert_int_equal(g_c->ops->bcast(g_c, msg, sizeof msg, 0), SITS_OK);
    char want[16];
    snprintf(want, sizeof want, "plan-%d", R);
    assert_string_equal(msg, want);
    assert_int_equal(g_c->ops->barrier(g_c), SITS_OK);
    free(all);
}

/* rank s sends (s + d) % 3 * 5 + d bytes to rank d, filled with (s * 31 + d + i) & 0xff */
static size_t cnt(int s, int d) { return (size_t)(((s + d) % 3) * 5 + d); }

static void test_alltoallv(void **state)
{
    int R = g_c->size, me = g_c->rank;
    size_t *sb = calloc((size_t)R, sizeof(size_t)), *so = calloc((size_t)R, sizeof(size_t));
    size_t *rb = calloc((size_t)R, sizeof(size_t)), *ro = calloc((size_t)R, sizeof(size_t));
    size_t st = 0, rt = 0;
    for (int p = 0; p < R; p++) {
        sb[p] = cnt(me, p); so[p] = st; st += sb[p];
        rb[p] = cnt(p, me); ro[p] = rt; rt += rb[p];
    }
    unsigned char *send = calloc(st + 1, 1), *recv = malloc(rt + 1);
    for (int p = 0; p < R; p++)
        for (size_t i = 0; i < sb[p]; i++) send[so[p] + i] = (unsigned char)((me * 31 + p + (int)i) & 0xff);
    memset(recv, 0xee, rt + 1);
    assert_int_equal(g_c->ops->alltoallv(g_c, send, sb, so, recv, rb, ro), SITS_OK);
    for (int p = 0; p < R; p++)
        for (size_t i = 0; i < rb[p]; i++) assert_int_equal(recv[ro[p] + i], (p * 31 + me + (int)i) & 0xff);
    assert_int_equal(recv[rt], 0xee); /* nothing written past the end */
    free(send); free(recv); free(sb); free(so); free(rb); free(ro);
}

static void test_send_recv_ring(void **state)
{
    int R = g_c->size, me = g_c->rank;
    if (R < 2) skip();
    int32_t out[64], in[64];
    for (int i = 0; i < 64; i++) out[i] = me * 100 + i;
    int next = (me + 1) % R, prev = (me + R - 1) % R;
    /* even ranks send first, odd ranks receive first: no deadlock with blocking calls */
    if (me % 2 == 0) {
        assert_int_equal(g_c->ops->send(g_c, out, sizeof out, next), SITS_OK);
        assert_int_equal(g_c->ops->recv(g_c, in, sizeof in, prev), SITS_OK);
    } else {
        assert_int_equal(g_c->ops->recv(g_c, in, sizeof in, prev), SITS_OK);
        assert_int_equal(g_c->ops->send(g_c, out, sizeof out, next), SITS_OK);
    }
    for (int i = 0; i < 64; i++) assert_int_equal(in[i], prev * 100 + i);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (sits_comm_mpi_create(MPI_COMM_WORLD, 60.0, &g_c) != SITS_OK) MPI_Abort(MPI_COMM_WORLD, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allreduce_gather_bcast),
        cmocka_unit_test(test_alltoallv),
        cmocka_unit_test(test_send_recv_ring),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL), total = 0;
    MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    sits_comm_destroy(g_c);
    MPI_Finalize();
    return total ? 1 : 0;
}
