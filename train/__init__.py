"""train: fit a model straight from a packed dataset, with the habits that converge.

    train fit ./images-wds --val-split 0.1 --epochs 30 --out runs/exp1
    python -m train fit ...            # the same
    torchrun --nproc-per-node 2 -m train fit ./images-wds --out runs/ddp
"""
