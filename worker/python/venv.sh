#!/usr/bin/env bash
# Makes (once) the Python environment a kind of Lockstep Python worker runs
# in, inside the build tree, and prints its interpreter's path:
#
#   worker/python/venv.sh torch|keras|tensorboard DIR
#
# torch: Debian's python3-torch and python3-numpy (deploy/local/
#        install_deps.sh python3-torch installs them) seen through
#        --system-site-packages, plus safetensors from PyPI.
# keras: TensorFlow (tensorflow-cpu, Keras 3) and safetensors from PyPI in
#        an environment of their own: TensorFlow needs a newer numpy than the
#        one Debian's torch is built against. numpy is the 2.x that
#        tensorflow-cpu pulls in today (the module's arrays are right under
#        numpy 1 and 2: native/conversions.h). tf-keras (Keras 2) is there
#        for the benchmark's MultiWorkerMirroredStrategy peer, which Keras
#        3's fit does not run (keras-team/keras#20585).
# tensorboard: the tensorboard package alone (its event reader, for the
#        test of the worker's --tensorboard_dir files).
# The versions are pinned; a stamp file says what built DIR, and anything
# else (or a half-made DIR) is made again. Without PyPI it fails, saying so.
set -euo pipefail
kind="${1:-}"
dir="${2:-}"
case "$kind" in
  torch) requirements=(safetensors==0.8.0); site=(--system-site-packages) ;;
  keras) requirements=(tensorflow-cpu==2.21.0 numpy==2.4.6 safetensors==0.8.0
                       tf-keras==2.21.0)
         site=() ;;
  tensorboard) requirements=(tensorboard==2.21.0); site=() ;;
  -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 torch|keras|tensorboard DIR" >&2; exit 2 ;;
esac
[[ -n "$dir" ]] || { echo "usage: $0 torch|keras|tensorboard DIR" >&2; exit 2; }
python=/usr/bin/python3
export TF_CPP_MIN_LOG_LEVEL=3  # No TensorFlow banner in the checks.
[[ -x "$python" ]] || { echo "error: $python not found (apt-get install python3)" >&2; exit 1; }
stamp_want="$kind ${requirements[*]} $("$python" -c 'import sys; print(sys.version.split()[0])')"
stamp="$dir/.lockstep-stamp"
check=(-c 'import safetensors')
[[ "$kind" == torch ]] && check=(-c 'import safetensors, torch, numpy')
[[ "$kind" == keras ]] && check=(-c 'import safetensors, numpy, tensorflow, keras, tf_keras')
[[ "$kind" == tensorboard ]] && check=(-c 'import tensorboard.backend.event_processing.event_accumulator')
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$stamp_want" ]] ||
   ! "$dir/bin/python" "${check[@]}" >/dev/null 2>&1; then
  echo "Creating $dir with ${requirements[*]} (once; reruns reuse it)" >&2
  rm -rf "$dir"
  "$python" -m venv "${site[@]}" "$dir"
  if ! "$dir/bin/python" -m pip install -q --disable-pip-version-check \
      "${requirements[@]}" >&2; then
    echo "error: could not install ${requirements[*]} from PyPI into $dir" >&2
    exit 1
  fi
  if ! "$dir/bin/python" "${check[@]}" >&2; then
    echo "error: $dir cannot import what it was made for" >&2
    exit 1
  fi
  echo "$stamp_want" > "$stamp"
fi
echo "$dir/bin/python"
