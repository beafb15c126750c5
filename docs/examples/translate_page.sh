#!/bin/sh
# Translate docs/examples/genesis.es.html through a running `mtkit serve`, as a
# LibreTranslate client sends HTML (format html), writing the answer's HTML:
#   mtkit serve -m runs/cpu-30m/model.pt --port 8765 &
#   sh docs/examples/translate_page.sh > docs/examples/genesis.en.html
python3 - "${1:-docs/examples/genesis.es.html}" "${2:-http://127.0.0.1:8765}" <<'PY'
import json, sys, urllib.request
page, server = open(sys.argv[1], encoding="utf-8").read(), sys.argv[2]
body = {"q": page, "source": "es", "target": "en", "format": "html"}
request = urllib.request.Request(server + "/translate", json.dumps(body).encode(),
                                  {"Content-Type": "application/json"})
sys.stdout.write(json.load(urllib.request.urlopen(request))["translatedText"])
PY
