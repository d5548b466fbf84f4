/* logit_stats.c -- see logit_stats.h. */
#include "bench/logit_stats.h"

#include <math.h>

double sits_bench_kl_row(const float *a, const float *b, int v, int *same_top1)
{
    double ma = -INFINITY, mb = -INFINITY, sa = 0, sb = 0, kl = 0;
    int ia = 0, ib = 0;
    for (int i = 0; i < v; i++) {
        if (a[i] > ma) { ma = a[i]; ia = i; }
        if (b[i] > mb) { mb = b[i]; ib = i; }
    }
    for (int i = 0; i < v; i++) { sa += exp(a[i] - ma); sb += exp(b[i] - mb); }
    double la = ma + log(sa), lb = mb + log(sb);
    for (int i = 0; i < v; i++) {
        double lpa = a[i] - la, lpb = b[i] - lb;
        kl += exp(lpa) * (lpa - lpb);
    }
    *same_top1 = ia == ib;
    return kl > 0 ? kl : 0;
}
