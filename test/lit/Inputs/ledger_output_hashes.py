# Checks the content hashes a ledger records for the model outputs (`h3c run --hash-nodes`) against the bytes of the
# output file, hashed by content_hash.py (docs/contract.md section 9, independent of h3c's C++). Exit 0 and one
# "ok" line per tensor when they agree, 1 otherwise.
import json, os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from content_hash import content_hash  # noqa: E402

ledger = json.load(open(sys.argv[1]))
raw = open(sys.argv[2], "rb").read()
hn = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + hn])
recorded = {o["value"]: o.get("hash") for n in ledger["nodes"] for o in n["outputs"]}
bad = 0
for name in ("sample", "audio_sample"):
    t = header[name]
    mine = content_hash(raw[8 + hn + t["data_offsets"][0]:8 + hn + t["data_offsets"][1]])
    theirs = recorded.get("unpack:" + name)
    print(("ok" if mine == theirs else "MISMATCH"), name, mine, theirs)
    bad += mine != theirs
sys.exit(1 if bad else 0)
