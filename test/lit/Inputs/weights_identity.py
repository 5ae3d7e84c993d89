# Checks a ledger's "weights" record (docs/contract.md section 11) against safetensors files: every tensor the record
# lists is read from the files (later files override earlier ones: a checkpoint, then the --update files), hashed with
# content_hash.py and combined by the formula, in Python, independent of h3c's C++. Prints "ok tensors" / "ok sha256"
# (or MISMATCH lines) and exits 1 on a mismatch.
#   weights_identity.py LEDGER.json FILE_OR_FOLDER...
#   weights_identity.py --extract FOLDER NAME OUT.safetensors     (one tensor of a folder into a file of its own)
#   weights_identity.py --trajectory TRAJ LEDGER FILE_OR_FOLDER...  (every step record's extra.weights_sha256 and
#                        the header's run.weights_sha256 against the formula over LEDGER's tensor list)
import hashlib, json, os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from content_hash import content_hash  # noqa: E402


def tensors(path):
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    out = {}
    for f in files:
        raw = open(f, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        head = json.loads(raw[8:8 + n])
        head.pop("__metadata__", None)
        for name, t in head.items():
            a, z = t["data_offsets"]
            out[name] = (t["dtype"], t["shape"], raw[8 + n + a:8 + n + z])
    return out


if sys.argv[1] == "--extract":
    dtype, shape, data = tensors(sys.argv[2])[sys.argv[3]]
    head = json.dumps({sys.argv[3]: {"dtype": dtype, "shape": shape, "data_offsets": [0, len(data)]}}).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    open(sys.argv[4], "wb").write(struct.pack("<Q", len(head)) + head + data)
    sys.exit(0)

traj = None
if sys.argv[1] == "--trajectory":
    traj = sys.argv[2]
    sys.argv = sys.argv[:1] + sys.argv[3:]
record = json.load(open(sys.argv[1]))["header"]["weights"]
have = {}
for p in sys.argv[2:]:
    have.update(tensors(p))
bad = 0
lines = []
for name in sorted(record["tensors"]):
    dtype, shape, data = have[name]
    h = content_hash(data)
    if h != record["tensors"][name]:
        print("MISMATCH tensor", name, h, record["tensors"][name])
        bad += 1
    lines.append(f"{name} {dtype} [{', '.join(map(str, shape))}] {h}\n")
print("ok tensors" if not bad else "MISMATCH tensors", len(lines))
sha = hashlib.sha256("".join(lines).encode()).hexdigest()
if traj is not None:
    header = json.load(open(os.path.join(traj, "header.json")))
    steps = sorted(f for f in os.listdir(os.path.join(traj, "steps")) if f.endswith(".json"))
    recorded = [json.load(open(os.path.join(traj, "steps", f)))["extra"]["weights_sha256"] for f in steps]
    same = header["run"]["weights_sha256"] == sha and all(r == sha for r in recorded)
    print(f"{'ok' if same else 'MISMATCH'} trajectory weights_sha256 ({len(recorded)} steps)")
    sys.exit(0 if same else 1)
print("ok sha256" if sha == record["sha256"] else f"MISMATCH sha256 {sha} {record['sha256']}")
sys.exit(1 if bad or sha != record["sha256"] else 0)
