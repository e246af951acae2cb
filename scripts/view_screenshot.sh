#!/usr/bin/env bash
# The README's screenshot of `sinklab view`: SmolLM2 on one sentence, rendered by headless
# Chromium with the network disabled. Usage: scripts/view_screenshot.sh [sinklab binary]
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-target/debug/sinklab}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bin" view --model smollm2 \
  --text "The cat sat on the mat. Attention sinks hold the first token, and the dog barked." \
  --out "$tmp/view.html"
chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
  --host-resolver-rules="MAP * ~NOTFOUND" --proxy-server=127.0.0.1:9 \
  --user-data-dir="$tmp/profile" --hide-scrollbars --window-size=1260,1300 \
  --virtual-time-budget=5000 --screenshot="$tmp/shot.png" "file://$tmp/view.html" 2>/dev/null
# Palette-quantised when python3 with Pillow is there, to keep docs/ small.
mkdir -p docs
py="${SINKLAB_PYTHON:-python3}"
if "$py" -c "import PIL" 2>/dev/null; then
  "$py" -c "from PIL import Image; Image.open('$tmp/shot.png').convert('RGB').quantize(128).save('docs/view.png', optimize=True)"
else
  cp "$tmp/shot.png" docs/view.png
fi
ls -l docs/view.png
