# Prints "same" when the plan's "producer", the ledger header's and the trajectory header's version records all equal
# the version and build that `--version` printed (argv[1]: that output; then plan.json, ledger.json, header.json).
import json, sys

words = open(sys.argv[1]).read().split()  # "<tool> <version> (build <build>)"
want = {"version": words[1], "build": words[3].rstrip(")")}
got = [json.load(open(sys.argv[2]))["producer"], json.load(open(sys.argv[3]))["header"]["h3c"],
       json.load(open(sys.argv[4]))["h3c"]]
print("same" if all(g == want for g in got) else f"differ: {want} {got}")
