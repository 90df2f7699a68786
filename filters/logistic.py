"""The scorers' small logistic heads (statistics stacker, style head, LM-discrepancy head): penalised
maximum likelihood by scipy's L-BFGS-B, so a fit is the library's optimum of a stated objective."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit


def _min_log_loss(Z, y, penalty) -> np.ndarray:
    """argmin_w sum(y * log(1 + exp(-Z w)) + (1 - y) * log(1 + exp(Z w))) + sum(penalty * w**2) / 2.

    The loss is summed without cancellation (math.fsum of positive terms) and the tolerances are at
    float precision: L-BFGS-B's line search stops where the loss can no longer be told apart, and a
    coarser loss would leave near-separable fits ~1e-6 short of the optimum."""

    def loss(w):
        z = Z @ w
        return math.fsum(y * np.logaddexp(0.0, -z) + (1 - y) * np.logaddexp(0.0, z)) + 0.5 * penalty @ (w * w)

    def grad(w):
        return Z.T @ (expit(Z @ w) - y) + penalty * w

    return minimize(loss, np.zeros(Z.shape[1]), jac=grad, method="L-BFGS-B",
                    options={"gtol": 1e-12, "ftol": 1e-16, "maxiter": 1000}).x


def fit_logreg(X, y, names, l2=1.0) -> dict:
    """Logistic regression on standardized features, L2 penalty l2/2 * |coef|^2 (intercept unpenalised);
    returns the head as filters.synthetic reads it."""
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    mean, std = X.mean(0), X.std(0) + 1e-9
    Z = np.hstack([np.ones((len(X), 1)), (X - mean) / std])
    penalty = np.full(Z.shape[1], float(l2))
    penalty[0] = 0.0
    w = _min_log_loss(Z, y, penalty)
    return {"mean": mean.tolist(), "std": std.tolist(), "coef": w[1:].tolist(), "bias": float(w[0]),
            "features": list(names)}


def fit_logistic_1d(x, y) -> tuple[float, float]:
    """(a, b) of P(y=1) = sigmoid(a*x + b) by unpenalised maximum likelihood. Separable data has no finite
    optimum: the fit then stops once the gradient is below 1e-12, with large finite coefficients."""
    Z = np.c_[np.asarray(x, float), np.ones(len(x))]
    w = _min_log_loss(Z, np.asarray(y, float), np.zeros(2))
    return float(w[0]), float(w[1])
