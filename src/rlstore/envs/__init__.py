"""Environments shipped with rlstore: the probe MDPs (:mod:`rlstore.envs.probes`, registered by
:func:`register_probes`) and the masked-velocity CartPole (:mod:`rlstore.envs.masked`,
``CartPoleNoVel-v1``, registered when this package is imported)."""

from rlstore.envs.masked import CartPoleNoVel, register_masked
from rlstore.envs.probes import register_probes

__all__ = ["CartPoleNoVel", "register_masked", "register_probes"]

register_masked()
