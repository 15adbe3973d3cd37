#!/usr/bin/env bash
# Runs the README's two commands (scripts/run.sh, scripts/test.sh) on Debian
# 12 roots that nobody prepared, so that a set-up step which only works
# because this machine already has something cannot pass unnoticed.
#
#   scripts/check_fresh.sh [bare] [image]     (default: both)
#
# Roots, each made anew with debootstrap (minbase) under $TC_FRESH_DIR
# (default /var/tmp/tensorcore-fresh):
#   bare   the minimal root alone;
#   image  plus the packages a new development machine of this kind has
#          (scripts/fresh-image-packages.txt: libblas-dev among them, whose
#          cblas.h is not OpenBLAS).
# Into each: the repository's tracked files as they are in this checkout (a
# clean clone of it when committed), and what the package clients need to
# reach their registries from inside (DNS, pip's configuration, the CA
# certificates); nothing else of this machine. Then, as root in a chroot
# with a clean environment: run.sh, test.sh, and a check that the set-up
# built what it promises on a machine with apt (OpenBLAS, gloo, the C++
# tests). Each step's time is reported.
#
# Exit status: 0 when every root passed, or when it cannot run here (not
# root, no mirror reachable: says SKIP and why); 1 when our set-up, build or
# tests failed in a root. Needs root (debootstrap, chroot, mount).
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${TC_FRESH_DIR:-/var/tmp/tensorcore-fresh}"
SUITE=bookworm
STEP_LIMIT="${TC_FRESH_STEP_LIMIT:-1200}"  # seconds a step may take (a step took at most 272 s here)
kinds=("$@")
((${#kinds[@]})) || kinds=(bare image)
say() { printf '[check_fresh] %s\n' "$*"; }
skip() { say "SKIP: $*"; exit 0; }

[[ $(id -u) -eq 0 ]] || skip "needs root (debootstrap, chroot, mount)"
command -v apt-get >/dev/null || skip "no apt-get on this machine"
if ! command -v debootstrap >/dev/null; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; } >/dev/null 2>&1 \
    || skip "debootstrap could not be installed (no package mirror reachable)"
fi

# The mirror apt already uses for the main archive.
mirror="${TC_FRESH_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  mirror=$(grep -rhsE '^(URIs:|deb) ' /etc/apt/sources.list /etc/apt/sources.list.d/ |
    grep -oE 'https?://[^ ]+/debian/?( |$)' | head -n1 | tr -d ' ')
  mirror="${mirror:-http://deb.debian.org/debian}"
fi
python3 - "$mirror" "$SUITE" <<'EOF' >/dev/null 2>&1 || skip "mirror $mirror unreachable"
import sys, urllib.request
urllib.request.urlopen("%s/dists/%s/Release" % (sys.argv[1].rstrip("/"), sys.argv[2]), timeout=30).read(64)
EOF

mkdir -p "$WORK/debs"
mounted=()
cleanup() {
  local m
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null; done
  mounted=()
}
trap cleanup EXIT
mnt() { mount "$@" && mounted+=("${@: -1}"); }

timed() {  # timed NAME CMD...: runs CMD, records its time
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  "$@"
  rc=$?
  times+=("$(printf '%-28s %5ds  %s' "$name" $(($(date +%s) - t0)) "$([[ $rc -eq 0 ]] && echo ok || echo "FAILED ($rc)")")")
  return $rc
}

in_root() {  # in_root ROOT CMD: bash -c CMD inside the root, clean environment, under the step limit
  local root=$1
  shift
  timeout "$STEP_LIMIT" env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb \
    DEBIAN_FRONTEND=noninteractive CI="${CI:-}" chroot "$root" /bin/bash -c "$*"
}

check_root() {  # check_root KIND: 0 when everything passed in that root
  local kind=$1 root="$WORK/$1"
  times=()
  say "== root '$kind' in $root"
  cleanup
  rm -rf "$root"
  timed "debootstrap (minbase)" timeout "$STEP_LIMIT" debootstrap --variant=minbase --cache-dir="$WORK/debs" "$SUITE" "$root" "$mirror" \
    >"$WORK/$kind-debootstrap.log" 2>&1 || { say "debootstrap failed: $(tail -n 3 "$WORK/$kind-debootstrap.log")"; return 2; }
  # What the package clients need from this machine, and nothing else.
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  if [[ "$kind" == image ]]; then
    mnt -t proc proc "$root/proc"
    # shellcheck disable=SC2046
    timed "image packages (apt)" in_root "$root" "apt-get update -qq && apt-get install -y -qq \
      $(grep -v '^#' "$REPO/scripts/fresh-image-packages.txt" | tr '\n' ' ')" >"$WORK/$kind-image.log" 2>&1 \
      || { say "installing the image packages failed: $(tail -n 3 "$WORK/$kind-image.log")"; return 2; }
    cleanup
  fi
  [[ -f /etc/pip.conf ]] && cp /etc/pip.conf "$root/etc/pip.conf"
  mkdir -p "$root/etc/ssl/certs" "$root/usr/local/share/ca-certificates"
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt" 2>/dev/null
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null
  # The repository's tracked files, as a clean clone has them.
  mkdir -p "$root/root/tensorcore"
  git -C "$REPO" ls-files -z | (cd "$REPO" && tar --null -T - -cf -) | tar -xf - -C "$root/root/tensorcore"
  mnt -t proc proc "$root/proc"
  mnt --bind /dev "$root/dev"
  mnt -t tmpfs -o mode=1777 shm "$root/dev/shm"
  mnt -t sysfs sys "$root/sys"
  local ok=0
  timed "scripts/run.sh (main job)" in_root "$root" "cd /root/tensorcore && scripts/run.sh" \
    >"$WORK/$kind-run.log" 2>&1 || ok=1
  timed "scripts/test.sh (all tests)" in_root "$root" "cd /root/tensorcore && scripts/test.sh -p no:cacheprovider" \
    >"$WORK/$kind-test.log" 2>&1 || ok=1
  # On a machine with apt the set-up must have installed every library the
  # build can use: the fallbacks are for machines without apt.
  timed "full build (OpenBLAS, gloo)" in_root "$root" "cd /root/tensorcore && .venv/bin/python -c '
import tensorcore as tc
v = tc.version()
print(v)
assert \"(openblas)\" in v, \"built without the system OpenBLAS: \" + v
with tc.Context(\"cpu\") as ctx:
    assert tc.capability_available(ctx.runtime_capabilities(), tc.TC_CAPABILITY_DIST_GLOO), \"built without gloo\"
'" >"$WORK/$kind-features.log" 2>&1 || ok=1
  grep -qE '^100% tests passed, 0 tests failed out of [1-9]' "$WORK/$kind-test.log" \
    || { times+=("C++ tests: none ran or some failed"); ok=1; }
  cleanup
  say "root '$kind':"
  printf '    %s\n' "${times[@]}"
  for log in run test features; do
    [[ $ok -ne 0 ]] && { say "--- tail of $kind-$log.log"; tail -n 25 "$WORK/$kind-$log.log"; }
  done
  grep -hE '^\[setup\]|passed|failed' "$WORK/$kind-run.log" "$WORK/$kind-test.log" | awk '!seen[$0]++' |
    tail -n 30 | sed 's/^/    /'
  [[ $ok -eq 0 ]] && [[ -z "${TC_FRESH_KEEP:-}" ]] && rm -rf "$root"
  return $ok
}

status=0
for kind in "${kinds[@]}"; do
  case $kind in bare|image) ;; *) say "unknown root '$kind' (bare, image)"; exit 2 ;; esac
  check_root "$kind"
  rc=$?
  if [[ $rc -eq 2 ]]; then
    say "root '$kind' could not be made (the mirror failed us, not our set-up): SKIP"
  elif [[ $rc -ne 0 ]]; then
    say "root '$kind': FAILED (logs in $WORK)"; status=1
  else
    say "root '$kind': PASSED"
  fi
done
exit $status
