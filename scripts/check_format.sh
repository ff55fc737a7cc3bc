#!/usr/bin/env bash
# Checks that every tracked C++/CUDA source (*.h *.hpp *.cpp *.cu *.cuh under src/ kernels/ tests/
# scripts/) is formatted as the root .clang-format says. Registered as the CTest test format_check.
#
#   scripts/check_format.sh            list the files clang-format would change; exit 1 if any
#   scripts/check_format.sh --verbose  also print clang-format's diagnostics for them
#   scripts/check_format.sh --fix      reformat those files in place
#
# CLANG_FORMAT names the binary (default: clang-format). Exits 77 (CTest's "skipped") when it is
# missing, so a machine without clang-format does not fail the suite.
set -euo pipefail

mode=check
case "${1:-}" in
  "") ;;
  --verbose) mode=verbose ;;
  --fix) mode=fix ;;
  *) echo "usage: $0 [--verbose | --fix]" >&2; exit 2 ;;
esac

clang_format="${CLANG_FORMAT:-clang-format}"
if ! command -v "$clang_format" > /dev/null 2>&1; then
  echo "check_format: '$clang_format' not found; skipping" >&2
  exit 77
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ ! -f .clang-format ]]; then
  echo "check_format: no .clang-format at $root" >&2
  exit 2
fi

# Tracked files when this is a git checkout; every file otherwise (e.g. a copy without .git).
files=()
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  while IFS= read -r -d '' f; do
    [[ -f "$f" ]] && files+=("$f")  # skips files deleted in the working tree
  done < <(git ls-files -z -- src kernels tests scripts |
             grep -zE '\.(h|hpp|cpp|cu|cuh)$' || true)
else
  while IFS= read -r -d '' f; do files+=("${f#./}"); done < <(
    find src kernels tests scripts -type f \
      \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) \
      -print0 2> /dev/null | sort -z)
fi

if [[ "$mode" == fix ]]; then
  ((${#files[@]})) && "$clang_format" -i -style=file "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  if ! "$clang_format" --dry-run --Werror -style=file "$f" > /dev/null 2>&1; then
    bad+=("$f")
    if [[ "$mode" == verbose ]]; then
      "$clang_format" --dry-run -style=file "$f" 2>&1 || true
    fi
  fi
done

if ((${#bad[@]})); then
  echo "check_format: ${#bad[@]} of ${#files[@]} files are not formatted ($("$clang_format" --version)):"
  printf '  %s\n' "${bad[@]}"
  echo "fix with: scripts/check_format.sh --fix   (details: scripts/check_format.sh --verbose)"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
