#!/usr/bin/env bash
# Copies what Python and PyTorch load at run time into OUT, as a tree to lay
# over the image it came from (the python target of the Dockerfile):
#   python_closure.sh BEFORE OUT
# Debian's PyTorch links OpenCV, FFmpeg, Qt and GDAL whole, and their
# packages bring LLVM, Perl, fonts and data that nothing here loads (1.8 GB
# installed). Kept: the Python interpreter and its standard library, every
# module in /usr/lib/python3/dist-packages, and every shared library that the
# interpreter or a module's extension (*.so*) needs, found with ldd --
# except files listed in BEFORE (the image's files before PyTorch was
# installed: the layer below has them already). A library is kept under the
# name it has and, as a link to it, under the name ldd prints (a soname,
# or an alternative such as libblas.so.3), in /usr (/lib is /usr/lib).
# Left out: numpy's test suite, and sympy and mpmath (95 MB; in PyTorch
# 1.13 only torch.fx.experimental imports them). Fails if a library cannot
# be found.
set -euo pipefail

[[ $# -eq 2 ]] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
before="$1"
out="$2"
mkdir -p "$out"

keep() {  # keep PATH: the file PATH names, and PATH as a link to it
  local real link
  real="$(readlink -f "$1")"
  link="$(readlink -f "$(dirname "$1")")/$(basename "$1")"
  if ! grep -qxF "$real" "$before" && [[ ! -e $out$real ]]; then
    mkdir -p "$out$(dirname "$real")"
    cp "$real" "$out$real"
  fi
  if [[ $link != "$real" ]] && ! grep -qxF "$link" "$before" &&
     [[ ! -L $out$link ]]; then
    mkdir -p "$out$(dirname "$link")"
    ln -s "$real" "$out$link"
  fi
}

# The interpreter's and the modules' files, links kept as links.
tar -C / -cf - --exclude='*/numpy/*/tests' \
    --exclude='usr/lib/python3/dist-packages/sympy*' \
    --exclude='usr/lib/python3/dist-packages/mpmath*' \
    usr/bin/python3 usr/bin/python3.11 usr/lib/python3.11 \
    usr/lib/python3/dist-packages | tar -C "$out" -xf -

# Every ELF file they load, and what those load.
mapfile -t objects < <(
  { echo /usr/bin/python3.11
    find /usr/lib/python3.11 /usr/lib/python3/dist-packages -name '*.so*' \
      -exec readlink -e {} \; ; } | sort -u)
missing=$(for o in "${objects[@]}"; do ldd "$o" || true; done | grep 'not found' |
          sort -u || true)
if [[ -n $missing ]]; then
  echo "python_closure.sh: libraries not found:" >&2
  echo "$missing" >&2
  exit 1
fi
# A module's link to a library (torch/lib/libtorch_global_deps.so, which
# torch opens by path) needs the file it names, link or not.
find /usr/lib/python3/dist-packages -type l -name '*.so*' | while read -r l; do
  t="$(readlink "$l")"
  [[ $t == /* ]] || t="$(dirname "$l")/$t"
  if [[ -e $t ]]; then keep "$t"; fi
done
for o in "${objects[@]}"; do
  keep "$o"
  { ldd "$o" || true; } | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do keep "$lib"; done
