import sys
sys.path.insert(0, "/work/main/tests")
from tiny_tokenized import save_tokenized_tiny_model
for fam in sys.argv[1:]:
    base, _, mtp = fam.partition("+")
    print(save_tokenized_tiny_model(base, f"/tmp/xc/{base}{'_mtp' if mtp else ''}", mtp=bool(mtp)))
