"""Reading packed datasets back: for verify and unpack (dataset.py), and for training
(loader.py: open_dataset, DataLoader)."""
