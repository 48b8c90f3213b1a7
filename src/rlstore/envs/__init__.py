"""Environments shipped with rlstore: the probe MDPs (:mod:`rlstore.envs.probes`, registered by
:func:`register_probes`), the masked-velocity CartPole (:mod:`rlstore.envs.masked`,
``CartPoleNoVel-v1``) and the key-door hard-exploration grid (:mod:`rlstore.envs.keydoor`,
``rlstore/KeyDoor-v0``), the last two registered when this package is imported."""

from rlstore.envs.keydoor import KeyDoorEnv, register_keydoor
from rlstore.envs.masked import CartPoleNoVel, register_masked
from rlstore.envs.probes import register_probes

__all__ = ["CartPoleNoVel", "KeyDoorEnv", "register_keydoor", "register_masked", "register_probes"]

register_masked()
register_keydoor()
