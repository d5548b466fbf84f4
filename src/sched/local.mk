# src/sched: step plans, the offline generation loop (and, with the server, the continuous-batching scheduler).
libsits_a_SOURCES += src/sched/plan.c src/sched/plan.h src/sched/generate.c src/sched/generate.h src/sched/worker.c src/sched/worker.h src/sched/sched.c src/sched/sched.h src/sched/scheduler.h src/sched/tenants.c src/sched/tenants.h
# [kv move] one rank's part of a KV move between replicas / prefill and decode ranks
libsits_a_SOURCES += src/sched/kvmove.c src/sched/kvmove.h
