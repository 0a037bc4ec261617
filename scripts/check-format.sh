#!/usr/bin/env bash
# Fails when a C++ file git tracks is off the checked-in .clang-format, naming each such file and
# the command that formats it. Part of the test command (scripts/test.sh).
#
#   scripts/check-format.sh          check
#   scripts/check-format.sh --fix    format those files in place
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang-format > /dev/null; then
  echo "check-format: error: clang-format is missing; run scripts/install-deps.sh" >&2
  exit 2
fi

mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cpp' '*.hpp' '*.cu')
# One clang-format for every file; with -Werror it names each off-format place "path:line:col: error:".
mapfile -t off < <(clang-format --dry-run -Werror "${files[@]}" 2>&1 |
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)

if [[ ${#off[@]} -eq 0 ]]; then
  echo "check-format: all ${#files[@]} C++ files follow .clang-format ($(clang-format --version | grep -o 'version [0-9.]*'))"
  exit 0
fi
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${off[@]}"
  echo "check-format: formatted ${#off[@]} files"
  exit 0
fi
printf 'check-format: off .clang-format: %s\n' "${off[@]}" >&2
echo "check-format: error: ${#off[@]} of ${#files[@]} C++ files are off .clang-format; run scripts/check-format.sh --fix (or git clang-format before committing)" >&2
exit 1
