"""scikit-learn's bundled datasets written as a user would have them: image folders, CSV.

    from sklearn_data import write_digits, write_table
    write_digits(Path("digits"), size=32)        # digits/0/0000.png ... 9/1796.png
    write_table("breast-cancer", Path("bc.csv"))  # features, then the label column

Nothing is downloaded: the datasets ship with scikit-learn. Also the linear baseline
that a trained model should beat: `linear_baseline(features, labels, task, train, val)`.
"""

from pathlib import Path

import numpy as np
from PIL import Image

TABLES = {  # name: (loader in sklearn.datasets, label column, task)
    "breast-cancer": ("load_breast_cancer", "diagnosis", "classify"),
    "wine": ("load_wine", "cultivar", "classify"),
    "diabetes": ("load_diabetes", "progression", "regress"),
}


def digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 8x8 digit images (grey levels 0 to 16) and their labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return data.images, data.target


def write_digits(root: Path, size: int = 32) -> Path:
    """root/D/NNNN.png: each digit scaled to size x size grey PNG, one folder per digit."""
    images, labels = digits()
    for digit in range(10):
        (root / str(digit)).mkdir(parents=True, exist_ok=True)
    for index, (image, label) in enumerate(zip(images, labels, strict=True)):
        pixels = Image.fromarray((image * (255 / 16)).round().astype(np.uint8), mode="L")
        pixels.resize((size, size), Image.BILINEAR).save(root / str(label) / f"{index:04d}.png")
    return root


def table(name: str):
    """(features as a DataFrame, the label Series) of one bundled table."""
    import sklearn.datasets

    loader, label, _ = TABLES[name]
    frame = getattr(sklearn.datasets, loader)(as_frame=True)
    features = frame.data.rename(columns=lambda c: str(c).replace(" ", "_"))
    return features, frame.target.rename(label)


def write_table(name: str, path: Path) -> Path:
    """The table as CSV: feature columns, then the label column."""
    features, labels = table(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    features.assign(**{labels.name: labels}).to_csv(path, index=False)
    return path


def linear_baseline(features: np.ndarray, targets: np.ndarray, task: str,
                    train: np.ndarray, val: np.ndarray, balanced: bool = False) -> float:
    """Standardised features, then a logistic regression (validation accuracy) or a
    ridge regression (validation MAE), fitted on the `train` rows only; `balanced`: the
    logistic regression weights classes by inverse frequency, and its macro-F1 is given."""
    from sklearn.linear_model import LogisticRegression, RidgeCV
    from sklearn.metrics import f1_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = (LogisticRegression(max_iter=5000, class_weight="balanced" if balanced else None)
             if task == "classify" else RidgeCV(alphas=np.logspace(-3, 3, 13)))
    fitted = make_pipeline(StandardScaler(), model).fit(features[train], targets[train])
    predicted = fitted.predict(features[val])
    if balanced:
        return float(f1_score(targets[val], predicted, average="macro"))
    if task == "classify":
        return float((predicted == targets[val]).mean())
    return float(np.abs(predicted - targets[val]).mean())
