# Shared helpers of the scripts: root check, package installation, the one release build,
# the median of a column of numbers, the kernel a Debian meta package installs.
# shellcheck shell=bash

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# where cargo builds: CARGO_TARGET_DIR when set, else target/ (release/, debian/ under it)
TARGET_DIR="$(realpath -m "${CARGO_TARGET_DIR:-$REPO_ROOT/target}")"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "run as root (tracerd loads BPF programs): sudo $0 $*"
}

# install_packages PKG...: apt-get installs the packages that are missing.
install_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Build-time and run-time packages a fresh Debian machine lacks.
install_build_deps() {
  install_packages clang llvm libelf-dev zlib1g-dev pkg-config make gcc libc6-dev iproute2 procps
  command -v cargo >/dev/null || die "cargo is missing: install a Rust toolchain (rustup) first"
}

# Perfetto's own trace schema (its Python package's perfetto_trace_pb2), in a virtualenv in
# target/: the system tests read exported timelines back with it, not with the exporter's types.
PERFETTO_VENV="$REPO_ROOT/target/perfetto-venv"
install_perfetto_decoder() {
  local check='import perfetto.protos.perfetto.trace.perfetto_trace_pb2'
  "$PERFETTO_VENV/bin/python3" -c "$check" 2>/dev/null && return 0
  command -v python3 >/dev/null || install_packages python3
  if ! python3 -m venv "$PERFETTO_VENV" >/dev/null 2>&1; then
    install_packages python3-venv
    rm -rf "$PERFETTO_VENV"
    python3 -m venv "$PERFETTO_VENV"
  fi
  say "installing Perfetto's Python package (its trace schema) into $PERFETTO_VENV"
  "$PERFETTO_VENV/bin/pip" install --quiet --disable-pip-version-check perfetto==0.59.1
  "$PERFETTO_VENV/bin/python3" -c "$check"
}

# Tools the scripts install for themselves (cargo install --root), pinned, in target/tools.
TOOLS_DIR="$REPO_ROOT/target/tools"

# cargo-deb, the Debian packager of scripts/package, at a pinned version (its own build in
# target/tools/build, removed after).
CARGO_DEB_VERSION=3.8.0
CARGO_DEB="$TOOLS_DIR/bin/cargo-deb"
install_cargo_deb() {
  "$CARGO_DEB" --version 2>/dev/null | grep -qxF "cargo-deb $CARGO_DEB_VERSION" && return 0
  say "installing cargo-deb $CARGO_DEB_VERSION into $TOOLS_DIR"
  cargo install --locked --quiet --force --root "$TOOLS_DIR" --target-dir "$TOOLS_DIR/build" \
    --version "$CARGO_DEB_VERSION" cargo-deb
  rm -rf "$TOOLS_DIR/build"
  "$CARGO_DEB" --version | grep -qxF "cargo-deb $CARGO_DEB_VERSION"
}

# Kubernetes' OpenAPI schemas with a validator (the kubernetes-validate package, which ships
# them), in a virtualenv in target/: scripts/test validates deploy/kubernetes/ offline.
KUBE_VALIDATE_VENV="$REPO_ROOT/target/kube-validate-venv"
KUBE_VALIDATE_VERSION=1.37.0
install_kubernetes_validate() {
  local check="import importlib.metadata as m; assert m.version('kubernetes-validate') == '$KUBE_VALIDATE_VERSION'"
  # the console script too: a venv moved with its target/ keeps scripts naming the old path
  "$KUBE_VALIDATE_VENV/bin/python3" -c "$check" 2>/dev/null &&
    "$KUBE_VALIDATE_VENV/bin/kubernetes-validate" --help >/dev/null 2>&1 && return 0
  command -v python3 >/dev/null || install_packages python3
  rm -rf "$KUBE_VALIDATE_VENV"
  if ! python3 -m venv "$KUBE_VALIDATE_VENV" >/dev/null 2>&1; then
    install_packages python3-venv
    rm -rf "$KUBE_VALIDATE_VENV"
    python3 -m venv "$KUBE_VALIDATE_VENV"
  fi
  say "installing kubernetes-validate $KUBE_VALIDATE_VERSION (Kubernetes' schemas) into $KUBE_VALIDATE_VENV"
  "$KUBE_VALIDATE_VENV/bin/pip" install --quiet --disable-pip-version-check \
    "kubernetes-validate==$KUBE_VALIDATE_VERSION"
  "$KUBE_VALIDATE_VENV/bin/python3" -c "$check"
}

# build_release [CARGO_ARGS...]: the release build, of the workspace's binaries by default; the
# arguments replace --workspace (e.g. --workspace --all-targets, or -p reproducer --example X).
build_release() {
  say "building (release)"
  [ $# -gt 0 ] || set -- --workspace
  (cd "$REPO_ROOT" && cargo build --release --locked "$@")
}

# in_order ROUND VARIANTS...: odd rounds take the variants as listed, even rounds in reverse.
# Which variant of a round goes first moves the numbers: in passes of two tracerd builds
# that run the same instructions on Redis's path, the one measured first took 40-50 ns more
# BPF time per request in either order.
in_order() {
  local r=$1; shift
  if (( r % 2 )); then echo "$@"; else printf '%s\n' "$@" | tac | tr '\n' ' '; fi
}

# median: the median of the numbers on stdin, one a line; "nan" when there are none.
median() {
  sort -g | awk '{a[NR]=$1} END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2] + a[NR/2+1]) / 2 }'
}

# kernel_of PACKAGE: the kernel version a meta package depends on, e.g. linux-image-amd64 ->
# 6.1.0-56-amd64.
kernel_of() {
  dpkg-query -W -f='${Depends}' "$1" | tr ',' '\n' | sed -n 's/^ *linux-image-\([0-9][^ ]*\).*/\1/p' | head -1
}
