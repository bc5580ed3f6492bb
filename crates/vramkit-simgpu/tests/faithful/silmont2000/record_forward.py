# Ours: reruns benchmark.py's memory recording as the shipped
# memory_forward_<precision>_128.pickle were made (assignment2-systems
# 0f94da4e, where RECORD_MEM was True and __main__ ran the Small model,
# forward only, context 128, 5 warm-up steps and 1 timed one).
# Usage: record_forward.py fp32|bf16; writes memory_forward_<p>_128.pickle.
import sys

import benchmark

benchmark.RECORD_MEM = True
benchmark.benchmark_model("Small", 128, mode="forward", precision=sys.argv[1], warmup_steps=5, num_steps=1)
