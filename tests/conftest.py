"""Shared fixtures: tiny random HF model folders of each family (written once per session) and the
bundled model's path."""

from __future__ import annotations

import pytest
import torch

from tiny_models import FAMILIES, add_random_mtp, save_tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """family -> folder with config.json + model.safetensors of a tiny seeded HF model."""
    cache: dict[str, str] = {}

    def get(family: str) -> str:
        """`family`, or `family+mtp` (a hybrid family with a random MTP head: "qwen3_next+mtp")."""
        if family not in cache:
            base, _, mtp = family.partition("+")
            folder = tmp_path_factory.mktemp(f"tiny-{base}{'-mtp' if mtp else ''}")
            save_tiny_model(base, str(folder))
            if mtp:
                add_random_mtp(str(folder))
            cache[family] = str(folder)
        return cache[family]

    return get


@pytest.fixture(scope="session")
def bundled_gguf() -> str:
    from strata.weights.source import bundled_model_path

    return bundled_model_path("smollm2-135m")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


__all__ = ["FAMILIES"]
