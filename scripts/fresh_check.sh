#!/usr/bin/env bash
# What a new user does: clone the repository, make a fresh virtual environment, and run the
# README's two commands (install + the main example, install + the test suite), timing each.
# Usage: scripts/fresh_check.sh [REPO]   (default: this checkout's committed HEAD)
set -euo pipefail
repo="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/graphc"
cd "$work/graphc"
python3 -m venv "$work/venv"
# shellcheck disable=SC1091
source "$work/venv/bin/activate"
python -m pip install -q --upgrade pip >/dev/null
# The two commands, verbatim from the README's "Two commands" block.
mapfile -t cmds < <(sed -n '/^## Two commands/,/^```$/p' README.md | grep '^pip install' \
                    | sed 's/ *#.*$//')
if [ "${#cmds[@]}" -ne 2 ]; then
    echo "fresh_check: expected two commands in the README, found ${#cmds[@]}" >&2
    exit 1
fi
for c in "${cmds[@]}"; do
    echo "== $c"
    start=$(date +%s)
    bash -c "$c"
    echo "== took $(( $(date +%s) - start )) s: $c"
done
