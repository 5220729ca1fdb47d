"""Validation metrics: multi-label scores per label, as scikit-learn computes them."""

import numpy as np
import pytest
import torch


def test_multilabel_metrics_are_per_label_with_ap_as_scikit_learn_gives_it():
    from sklearn.metrics import average_precision_score

    from train.metrics import Metrics

    rng = np.random.default_rng(5)
    scores = rng.normal(size=(60, 3))
    truths = rng.random((60, 3)) < 0.3
    truths[:, 2] = False  # a label that no sample has
    metrics = Metrics("multilabel", ["a", "b", "c"], torch.device("cpu"))
    for rows in (slice(0, 25), slice(25, 60)):
        metrics.update(torch.tensor(0.1), torch.tensor(scores[rows]),
                       torch.tensor(truths[rows], dtype=torch.float32))
    result = metrics.result()
    for j, name in enumerate("ab"):
        assert result["per_label"][name]["ap"] == pytest.approx(
            average_precision_score(truths[:, j], scores[:, j]))
        assert result["per_label"][name]["samples"] == truths[:, j].sum()
    assert result["per_label"]["c"] == {"precision": 0.0, "recall": None, "f1": None,
                                        "ap": None, "samples": 0}
    assert result["map"] == pytest.approx((result["per_label"]["a"]["ap"]
                                           + result["per_label"]["b"]["ap"]) / 2)
