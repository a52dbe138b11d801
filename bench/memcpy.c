/* Single-core memcpy bandwidth, the ceiling for a loopback TCP byte (copied twice:
 * sender's buffer -> socket buffer, socket buffer -> receiver's buffer).
 * Two figures: chunks of CHUNK bytes cycling through a ring that fits in the last-level
 * cache (like socket buffers on loopback), and through a ring far larger than it (DRAM).
 * Prints "memcpy_cache_GBps=X memcpy_dram_GBps=Y" (GB = 1e9 bytes per CPU-second).
 * Usage: memcpy [chunk_bytes] [seconds_per_figure] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPU time of this thread, not wall time: on a shared machine the copy rate per
 * CPU-second is the core's bandwidth whatever else runs. */
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Copies CHUNK-byte pieces from src ring to dst ring for about `secs`; returns GB/s. */
static double run(size_t ring, size_t chunk, double secs) {
    char *src = malloc(ring), *dst = malloc(ring);
    if (!src || !dst) { perror("malloc"); exit(1); }
    memset(src, 0xa5, ring);
    memset(dst, 0x5a, ring);
    size_t pieces = ring / chunk, i = 0;
    double bytes = 0, t0 = now(), t;
    do {
        for (int k = 0; k < 256; k++) {
            memcpy(dst + (i % pieces) * chunk, src + (i % pieces) * chunk, chunk);
            i++;
        }
        bytes += 256.0 * chunk;
        t = now();
    } while (t - t0 < secs);
    /* Keep the copies observable so the compiler cannot drop them. */
    volatile char sink = dst[(i / 2 % pieces) * chunk];
    (void)sink;
    free(src);
    free(dst);
    return bytes / (t - t0) / 1e9;
}

int main(int argc, char **argv) {
    size_t chunk = argc > 1 ? strtoul(argv[1], NULL, 10) : 32768;
    double secs = argc > 2 ? atof(argv[2]) : 1.0;
    if (chunk == 0) chunk = 32768;
    double cache = run(4u << 20, chunk, secs);
    double dram = run(512u << 20, chunk, secs);
    printf("memcpy_cache_GBps=%.2f memcpy_dram_GBps=%.2f chunk=%zu\n", cache, dram, chunk);
    return 0;
}
