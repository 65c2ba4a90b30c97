"""Noise sources: OpenDP for releases, numpy for seeded experiments."""

import numpy as np
import pytest

from querysmasher.errors import InputError
from querysmasher.noise import make_noise


def test_default_is_the_exact_discrete_sampler_unseeded_and_a_seed_means_numpy():
    assert (make_noise().sampler, make_noise().seeded) == ("discrete", False)
    assert (make_noise(sampler="opendp").sampler, make_noise(sampler="opendp").seeded) == ("opendp", False)
    assert (make_noise(5).sampler, make_noise(5).seeded) == ("numpy", True)
    assert (make_noise(sampler="numpy").sampler, make_noise(sampler="numpy").seeded) == ("numpy", False)


@pytest.mark.parametrize("seed, sampler", [(-1, None), (1, "opendp"), (1, "discrete"), (None, "mt19937")])
def test_bad_choices_are_input_errors(seed, sampler):
    with pytest.raises(InputError):
        make_noise(seed, sampler)


@pytest.mark.parametrize("sampler", ["discrete", "opendp"])
def test_exact_noise_has_the_requested_scale_and_is_not_reproducible(sampler):
    src = make_noise(sampler=sampler)
    clean = np.full(4000, 10.0)
    y = src.add_gaussian(clean, sigma2=9.0, sensitivity2=1.0)
    z = (y - 10.0) / 3.0
    # mean 0 and variance 1 within 5 standard errors (n = 4000)
    assert abs(z.mean()) < 5 / np.sqrt(4000) and abs(z.var() - 1) < 5 * np.sqrt(2 / 4000)
    assert not np.array_equal(y, make_noise(sampler=sampler).add_gaussian(clean, 9.0, sensitivity2=1.0))
    with pytest.raises(ValueError, match="draws none alone"):
        src.standard_normal((3, 2))


def test_the_discrete_sampler_needs_the_sensitivity_it_fits_its_grid_to():
    with pytest.raises(ValueError, match="sensitivity"):
        make_noise().add_gaussian(np.zeros(3), 1.0)


def test_numpy_seeded_noise_is_reproducible():
    a = make_noise(7).add_gaussian(np.zeros(5), 2.0)
    assert np.array_equal(a, make_noise(7).add_gaussian(np.zeros(5), 2.0))
