"""One training step of a model from vramkit-simgpu's tests, under PyTorch's
own CUDA caching allocator or under vramkit's (vramkit.torch.enable()),
with the allocator's history recorded; pickles what the allocator reports
after the step.

usage: allocator_step.py pytorch|vramkit MODEL BATCH OUT [CONF]

MODEL is gpt2, resnet or unet (MODEL_STEPS/<model>_step.py, which hand their
step to `common.run`, replaced here). CONF is a PYTORCH_CUDA_ALLOC_CONF:
PyTorch's allocator reads it from the environment, vramkit gets it from
enable(conf). OUT receives {"stats", "snapshot", "extra", "device"}, and
"boundary_errors" under vramkit.
"""
import os
import pickle
import runpy
import sys

allocator, model, batch, out = sys.argv[1:5]
conf = sys.argv[5] if len(sys.argv) > 5 else ""
steps = os.environ["MODEL_STEPS"]
sys.path.insert(0, steps)
if allocator == "pytorch" and conf:
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf

import torch  # noqa: E402

if allocator == "vramkit":
    import vramkit

    vramkit.torch.enable(conf or None)
    vramkit.record_memory_history()
else:
    # No stack frames: vramkit records none, and they are not compared.
    torch.cuda.memory._record_memory_history(context=None)

import common  # noqa: E402


def run(args, step, **extra):
    step()
    torch.cuda.synchronize()
    if allocator == "vramkit":
        report = {"stats": dict(vramkit.memory_stats()), "snapshot": vramkit.snapshot()}
    else:
        report = {"stats": dict(torch.cuda.memory_stats()), "snapshot": torch.cuda.memory._snapshot()}
    report["extra"] = {key: value() if callable(value) else value for key, value in extra.items()}
    report["device"] = torch.cuda.get_device_name(0)
    if allocator == "vramkit":
        report["boundary_errors"] = vramkit.boundary_errors()
    with open(out, "wb") as f:
        pickle.dump(report, f)


common.run = run
sys.argv = [f"{model}_step.py", "--batch", batch, "--snapshot", out + ".unused"]
runpy.run_path(os.path.join(steps, f"{model}_step.py"), run_name="__main__")
