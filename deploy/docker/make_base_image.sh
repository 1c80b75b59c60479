#!/usr/bin/env bash
# Makes the base image of deploy/docker/Dockerfile from Debian's own
# packages, with no image registry: debootstrap --variant=minbase bookworm
# into a folder, then `docker import`. The Debian mirror is the one this
# machine's apt already uses (read from its sources at run time), and the
# image's apt sources name the same mirror and suites, so `apt-get` in a
# `docker build --network host` reaches it too.
#
#   deploy/docker/make_base_image.sh [--tag TAG] [--cache DIR] [--force]
#
# --tag    the image to make (default lockstep-base:bookworm)
# --cache  a folder for the root file system's tarball: a later run (or
#          another Docker daemon) imports it instead of bootstrapping again
# --force  bootstrap again even if the image or the tarball exists
# Needs root, debootstrap and a running Docker daemon (DOCKER_HOST is
# honoured). Prints the image's name on its last line.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

tag="lockstep-base:bookworm"
cache=""
force=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --tag=*) tag="${1#*=}"; shift ;;
    --cache) cache="$2"; shift 2 ;;
    --cache=*) cache="${1#*=}"; shift ;;
    --force) force=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
readonly suite="bookworm"
docker="${DOCKER:-docker}"

if [[ $force -eq 0 ]] && "$docker" image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi

# The Debian suites of this machine's apt sources, one "URI SUITE COMPONENTS"
# line each, from both the one-line and the deb822 formats. Only the
# suites of this release count (not third-party ones such as nodistro).
apt_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                       uri = $i; suite = $(i + 1); comps = "";
                       for (j = i + 2; j <= NF; j++) comps = comps " " $j;
                       print uri, suite comps }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    awk 'function flush() { if (uris != "" && enabled != "no") {
                              n = split(uris, u, " "); m = split(suites, s, " ");
                              for (a = 1; a <= n; a++) for (b = 1; b <= m; b++)
                                print u[a], s[b], comps }
                            uris = suites = comps = ""; enabled = "" }
         /^[ \t]*$/ { flush(); next }
         /^URIs:/ { sub(/^URIs:[ \t]*/, ""); uris = $0 }
         /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
         /^Components:/ { sub(/^Components:[ \t]*/, ""); comps = $0 }
         /^Enabled:/ { enabled = $2 }
         END { flush() }' "$f"
  done
}

sources="$(apt_sources | awk -v s="$suite" '$2 == s || $2 == s "-updates" ||
                                            $2 == s "-security" || $2 == s "/updates"')"
mirror="$(awk -v s="$suite" '$2 == s { print $1; exit }' <<<"$sources")"
if [[ -z "$mirror" ]]; then
  echo "error: no '$suite' suite in this machine's apt sources" \
    "(/etc/apt/sources.list, /etc/apt/sources.list.d); cannot pick a mirror" >&2
  exit 1
fi

tarball="${cache:+$cache/lockstep-base-$suite.tar}"
if [[ $force -eq 1 || -z "$tarball" || ! -s "$tarball" ]]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    echo "error: debootstrap not found (apt-get install debootstrap)" >&2
    exit 1
  fi
  work="$(mktemp -d "${TMPDIR:-/tmp}/lockstep-base.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  echo "Bootstrapping Debian $suite (minbase) from $mirror" >&2
  if ! debootstrap --variant=minbase "$suite" "$work/root" "$mirror" \
      >"$work/debootstrap.log" 2>&1; then
    tail -20 "$work/debootstrap.log" >&2
    echo "error: debootstrap failed (log above)" >&2
    exit 1
  fi
  # The image's apt sources: the same mirrors and suites as this machine's.
  awk '{ printf "deb %s %s", $1, $2; for (i = 3; i <= NF; i++) printf " %s", $i;
         print "" }' <<<"$sources" | sort -u >"$work/root/etc/apt/sources.list"
  rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
  out="${tarball:-$work/root.tar}"
  [[ -n "$tarball" ]] && mkdir -p "$cache"
  tar -C "$work/root" --numeric-owner -cf "$out.partial" .
  mv "$out.partial" "$out"
  tarball="$out"
fi
"$docker" import --change 'CMD ["bash"]' "$tarball" "$tag" >/dev/null
echo "$tag"
