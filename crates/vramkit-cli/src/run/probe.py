"""Which torch this Python would import, read without importing it (importing needs a GPU stack).

Prints one JSON object: the interpreter, torch's directory, its version, and the CUDA and ROCm
versions it was built with (torch/version.py), and the METADATA of its distribution (the NVIDIA
library versions it pins); torch_dir is null when there is no torch.
"""
import ast
import glob
import importlib.util
import json
import os
import re
import sys

out = {"python": sys.executable, "torch_dir": None}
spec = importlib.util.find_spec("torch")
if spec is not None and spec.origin:
    torch_dir = os.path.dirname(spec.origin)
    out["torch_dir"] = torch_dir
    try:
        with open(os.path.join(torch_dir, "version.py")) as f:
            text = f.read()
    except OSError:
        text = ""
    for key, name in (("version", "__version__"), ("cuda", "cuda"), ("hip", "hip")):
        # `cuda: Optional[str] = '13.2'` (newer) or `cuda = '12.1'` (older)
        found = re.search(r"^%s\s*(?::[^=\n]*)?=\s*(.+)$" % re.escape(name), text, re.M)
        try:
            out[key] = ast.literal_eval(found.group(1).strip()) if found else None
        except (ValueError, SyntaxError):
            out[key] = None
    # Stale dist-info directories of other versions may sit beside the live one.
    public = (out["version"] or "").split("+")[0]
    metadata = sorted(glob.glob(os.path.join(os.path.dirname(torch_dir), "torch-*.dist-info", "METADATA")),
                      key=lambda m: os.path.basename(os.path.dirname(m)).startswith("torch-%s" % public))
    out["metadata"] = metadata[-1] if metadata else None
print(json.dumps(out))
