/* logit_stats.h -- comparing two runs' logits (the accuracy programs sits-fp8-accuracy and
 * sits-kv-int8-accuracy): per row the KL divergence of the softmaxes and whether the argmaxes agree. */
#ifndef SITS_BENCH_LOGIT_STATS_H
#define SITS_BENCH_LOGIT_STATS_H

/* KL(p || q) in nats of the softmaxes of logit rows a (the reference, p) and b (q), both [v];
 * *same_top1 = 1 when their argmaxes (lowest index on ties) agree. Computed in double; >= 0. */
double sits_bench_kl_row(const float *a, const float *b, int v, int *same_top1);

#endif
