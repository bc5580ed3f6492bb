#!/usr/bin/env python3
"""Lists the symbols torch imports from NVIDIA libraries, per CUDA major.

Run at development time, never at build time; commit what it writes:

    python3 tools/gen_symbols.py OUT_DIR torch-*.whl

For each wheel (torch CUDA wheels from the package index), the shared
libraries under torch/lib and torch/_C*.so are taken out one at a time into a
temporary directory and read with `nm -D --undefined-only --with-symbol-versions`
and `readelf -d`. An undefined symbol belongs to an NVIDIA library when its
version node names one (`cublasCreate_v2@libcublas.so.13`, `NVSHMEM` is
libnvshmem_host), or, unversioned, when its prefix names a family (nccl,
cusparseLt, cuFile, the driver's cu[A-Z]) and the importing library has that
family in its DT_NEEDED: the soname comes from DT_NEEDED, so it is right for
each major. Weak references are left out (the importer copes without them).

Writes OUT_DIR/cuda<major>.txt for each CUDA major met: the union over that
major's wheels, sections `[soname]` or `[soname version=NODE]`, one symbol a
line. Libraries torch links without importing a symbol (libcurand.so.10 in
2.8) or only dlopens get an empty section.
"""
import collections, os, re, subprocess, sys, tempfile, zipfile

# Unversioned imports: symbol prefix -> the DT_NEEDED soname prefix of its library.
FAMILIES = [
    (re.compile(r'^nccl'), 'libnccl.so'),
    (re.compile(r'^cusparseLt'), 'libcusparseLt.so'),
    (re.compile(r'^cuFile'), 'libcufile.so'),
    (re.compile(r'^nvshmem'), 'libnvshmem_host.so'),
    (re.compile(r'^cudnn'), 'libcudnn.so'),
    (re.compile(r'^cublasLt'), 'libcublasLt.so'),
    (re.compile(r'^cublas'), 'libcublas.so'),
    (re.compile(r'^cusparse'), 'libcusparse.so'),
    (re.compile(r'^cusolver'), 'libcusolver.so'),
    (re.compile(r'^cufft'), 'libcufft.so'),
    (re.compile(r'^curand'), 'libcurand.so'),
    (re.compile(r'^cupti|^Cupti'), 'libcupti.so'),
    (re.compile(r'^nvrtc'), 'libnvrtc.so'),
    (re.compile(r'^(cuda|__cuda)'), 'libcudart.so'),
    (re.compile(r'^cu[A-Z]'), 'libcuda.so'),
    (re.compile(r'^nvtx'), 'libnvToolsExt.so'),
]
# Version nodes that are not sonames.
NODE_SONAME = {'NVSHMEM': 'libnvshmem_host.so.3'}
# Libraries torch (or torch/__init__.py's preloading) opens by name without
# importing a symbol from them: soname patterns filled with the major.
DLOPENED = ['libnvJitLink.so.{major}', 'libnvrtc-builtins.so.{major}']


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def cuda_version(z):
    text = z.read('torch/version.py').decode()
    m = re.search(r"^cuda(?:: \S+)? = '([0-9.]+)'", text, re.M)
    if not m:
        sys.exit(f'no CUDA version in torch/version.py of {z.filename}: not a CUDA wheel')
    return m.group(1)


def scan(wheel):
    """(torch version, CUDA version, {soname: {symbol: node or None}})"""
    z = zipfile.ZipFile(wheel)
    cuda = cuda_version(z)
    torch = re.search(r"^__version__ = '([^']+)'", z.read('torch/version.py').decode(), re.M).group(1)
    names = [n for n in z.namelist()
             if (n.startswith('torch/lib/') and '.so' in n) or re.match(r'torch/_C[.].*so$', n)]
    found = collections.defaultdict(dict)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = z.extract(name, tmp)
            needed = re.findall(r'\(NEEDED\).*\[(.*)\]', run('readelf', '-d', path))
            for soname in needed:  # linked, whether or not a symbol is imported
                if any(soname.startswith(lib + '.') for _, lib in FAMILIES):
                    found.setdefault(soname, {})
            for line in run('nm', '-D', '--undefined-only', '--with-symbol-versions', path).splitlines():
                parts = line.split()
                if len(parts) != 2 or parts[0] != 'U':
                    continue
                symbol, _, node = parts[1].partition('@')
                node = node.lstrip('@') or None
                soname = None
                if node and node.startswith('lib') and '.so' in node:
                    soname = node
                elif node in NODE_SONAME:
                    soname = NODE_SONAME[node]
                elif node is None:
                    family = next((lib for pat, lib in FAMILIES if pat.match(symbol)), None)
                    soname = next((n for n in needed if family and n.startswith(family + '.')), None)
                if soname:
                    found[soname].setdefault(symbol, node)
            os.remove(path)
    return torch, cuda, found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, wheels = sys.argv[1], sys.argv[2:]
    by_major = collections.defaultdict(lambda: collections.defaultdict(dict))
    releases = collections.defaultdict(list)
    for wheel in wheels:
        torch, cuda, found = scan(wheel)
        major = cuda.split('.')[0]
        releases[major].append(f'{torch} (CUDA {cuda})')
        for soname, symbols in found.items():
            lib = by_major[major][soname]
            for symbol, node in symbols.items():
                lib.setdefault(symbol, node)
        print(f'{wheel}: torch {torch}, CUDA {cuda}, {sum(len(s) for s in found.values())} symbols '
              f'from {len(found)} libraries', file=sys.stderr)
    for major, libs in sorted(by_major.items()):
        for pattern in DLOPENED:
            libs.setdefault(pattern.format(major=major), {})
        lines = [f'# What torch imports from NVIDIA libraries, CUDA {major} wheels: torch '
                 + ', '.join(releases[major]) + '.',
                 '# Generated by tools/gen_symbols.py; do not edit. A section per library:',
                 '# [soname] or [soname version=NODE] (the symbol version node), then one symbol a line.']
        for soname in sorted(libs):
            nodes = sorted({n for n in libs[soname].values() if n})
            if len(nodes) > 1:
                sys.exit(f'{soname}: more than one version node {nodes}')
            lines.append(f'[{soname} version={nodes[0]}]' if nodes else f'[{soname}]')
            lines.extend(sorted(libs[soname]))
        with open(os.path.join(out, f'cuda{major}.txt'), 'w') as f:
            f.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
