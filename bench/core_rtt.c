/* Core-to-core round trip: how long one cache line takes to go from CPU 0 to CPU 1 and
 * back. On a VM the host may move the vCPUs between cores that share a cache (tens of
 * ns) and cores that do not (hundreds), and a loopback byte crosses between the
 * sender's and the receiver's core; bench/placement reads this around each run.
 * Prints "core_rtt_ns=X" (mean over the round trips).
 * Usage: core_rtt [round_trips] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Atomic long line __attribute__((aligned(64)));
static long trips = 100000;

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* CPU 1's side: answers each odd value with the next even one. */
static void *answer(void *unused) {
    (void)unused;
    if (pin(1) != 0) {
        fprintf(stderr, "core_rtt: cannot run on CPU 1\n");
        exit(1);
    }
    for (long i = 0; i < trips; i++) {
        while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 1)
            ;
        atomic_store_explicit(&line, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1)
        trips = atol(argv[1]);
    if (trips <= 0 || pin(0) != 0) {
        fprintf(stderr, "usage: core_rtt [round_trips] (needs CPUs 0 and 1)\n");
        return 1;
    }
    pthread_t peer;
    if (pthread_create(&peer, NULL, answer, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < trips; i++) {
        atomic_store_explicit(&line, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 2)
            ;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(peer, NULL);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("core_rtt_ns=%.1f\n", ns / trips);
    return 0;
}
