/* Exercises libvramkit_capi through its C header, as a C program (or
 * PyTorch) would. Run with VRAMKIT_DEVICE=sim:1GiB, or on the CUDA backend
 * (VRAMKIT_DEVICE unset) over a GPU of 1 GiB with two devices: the fake
 * driver of crates/vramkit-fake-cuda. Prints one line per check; the Rust
 * test `c_program` compiles it, runs it and reads both stdout and stderr. */
#include "vramkit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (cond) {                                                        \
            printf("ok   %s\n", #cond);                                    \
        } else {                                                           \
            printf("FAIL %s (line %d)\n", #cond, __LINE__);                \
            failures++;                                                    \
        }                                                                  \
    } while (0)

/* Whether the JSON/text string from vramkit contains `needle`; frees it. */
static int contains(char *text, const char *needle) {
    int found = text != NULL && strstr(text, needle) != NULL;
    if (!found && text != NULL) {
        printf("---- %s not in:\n%s\n----\n", needle, text);
    }
    vramkit_free_string(text);
    return found;
}

int main(void) {
    void *stream = NULL;
    printf("vramkit %s\n", vramkit_version());
    CHECK(vramkit_boundary_errors() == 0);

    /* PyTorch's two entry points. */
    CHECK(vramkit_malloc(0, 0, stream) == NULL);
    void *a = vramkit_malloc(1000, 0, stream);
    void *b = vramkit_malloc(3 << 20, 0, stream);
    CHECK(a != NULL && b != NULL && a != b);
    CHECK(contains(vramkit_memory_stats(0), "\"allocation.all.current\":2,"));
    vramkit_free(a, 1000, 0, stream);
    CHECK(contains(vramkit_memory_stats(0), "\"allocation.all.current\":1,"));

    /* Misuse: each prints one line on stderr and counts. */
    vramkit_free(a, 1000, 0, stream);                  /* double free */
    CHECK(vramkit_boundary_errors() == 1);
    vramkit_free((void *)0x1234, 8, 0, stream);        /* never handed out */
    vramkit_free(NULL, 16, 0, stream);                 /* null with a size */
    vramkit_free(NULL, 0, 0, stream);                  /* pair of malloc(0): fine */
    CHECK(vramkit_boundary_errors() == 3);
    vramkit_free(b, 5, 0, stream);                     /* wrong size: freed anyway */
    CHECK(vramkit_boundary_errors() == 4);
    CHECK(contains(vramkit_memory_stats(0), "\"allocation.all.current\":0,"));
    void *c = vramkit_malloc(4096, 1, stream);
    vramkit_free(c, 4096, 0, stream);                  /* wrong device: freed on 1 */
    CHECK(vramkit_boundary_errors() == 5);
    CHECK(contains(vramkit_memory_stats(1), "\"allocation.all.current\":0,"));
    vramkit_record_stream((void *)0x99, stream);       /* unknown pointer */
    CHECK(vramkit_boundary_errors() == 6);

    /* Out of memory: NULL, and PyTorch's message plus the diagnosis on stderr. */
    CHECK(vramkit_malloc((size_t)2 << 30, 0, stream) == NULL);
    CHECK(contains(vramkit_memory_stats(0), "\"num_ooms\":1,"));

    /* Settings: a refused string changes nothing and says why. */
    CHECK(vramkit_set_settings("max_split_size_mb:10") == -1);
    CHECK(vramkit_set_settings("garbage_collection_threshold:0.5") == 0);
    /* The backend is fixed at first use: naming it again is fine. */
    const char *backend = getenv("VRAMKIT_DEVICE");
    int on_sim = backend != NULL && strncmp(backend, "sim", 3) == 0;
    CHECK(vramkit_select_backend(on_sim ? "sim:1GiB" : "cuda") == 0);
    CHECK(vramkit_select_backend(on_sim ? "cuda" : "sim:1GiB") == -1);

    /* Summary and snapshot. */
    CHECK(contains(vramkit_memory_summary(0, 0), "PyTorch CUDA memory summary, device ID 0"));
    CHECK(contains(vramkit_memory_summary(0, 1), "CUDA OOMs: 1"));
    CHECK(vramkit_record_history(0, 1, 100) == 0);
    void *d = vramkit_malloc(512, 0, stream);
    vramkit_record_stream(d, (void *)0x2);
    vramkit_free(d, 512, 0, stream);
    char *snapshot = vramkit_snapshot();
    CHECK(snapshot != NULL && strstr(snapshot, "\"device_traces\":[[{\"action\":") != NULL);
    CHECK(snapshot != NULL && strstr(snapshot, "{\"action\":\"alloc\",\"addr\":") != NULL);
    vramkit_free_string(snapshot);
    vramkit_free_string(snapshot);                     /* a string given back twice */
    CHECK(vramkit_boundary_errors() == 7);

    /* The hooks PyTorch's C++ side could set. */
    vramkit_set_memory_fraction(0.5, 0);
    vramkit_set_memory_fraction(2.0, 0);               /* refused, printed */
    vramkit_empty_cache();
    CHECK(contains(vramkit_memory_stats(0), "\"reserved_bytes.all.current\":0,"));
    vramkit_reset_peak_stats(0);
    vramkit_reset_accumulated_stats(0);
    CHECK(contains(vramkit_memory_stats(0), "\"allocation.all.allocated\":0,"));

    printf("boundary errors: %llu\n", (unsigned long long)vramkit_boundary_errors());
    printf(failures == 0 ? "ALL CHECKS PASSED\n" : "%d CHECKS FAILED\n", failures);
    return failures == 0 ? 0 : 1;
}
