"""PyTorchRL's storage with V-trace targets (IMPALA, Espeholt et al. 2018): VTraceBuffer."""

from __future__ import annotations

from typing import ClassVar

import torch

from rlstore import returns as R
from rlstore.compat.pytorchrl import protocols as K
from rlstore.compat.pytorchrl._layout import gather, layout_a
from rlstore.compat.pytorchrl.vanilla import VanillaOnPolicyBuffer

__all__ = ["VTraceBuffer"]


class VTraceBuffer(VanillaOnPolicyBuffer):
    """PyTorchRL's storage with V-trace targets (IMPALA, arXiv:1802.01561).

    :meth:`compute_vtrace` re-evaluates the stored actions and values with the current actor,
    then :func:`rlstore.returns.vtrace` with the stored log-probs as behaviour policy:
    ``ExternalReturn[:L] = vs``, ``Advantage`` = normalized PG advantages (eps 1e-8),
    ``LogProbability[:L]`` = the current log-probs (as PyTorchRL: the PPO ratio starts at 1).

    PyTorchRL's ``compute_vtrace`` is broken and not copied: it put discounted returns where
    rewards belong in delta, did not mask the next value at episode ends, and called methods
    with the wrong arguments. Rewards, termination/truncation and bootstrap follow rlstore."""

    _adv_eps: ClassVar[float] = 1e-8

    def before_gradients(self) -> None:
        """Bootstrap from V(Observation[L]) and compute the V-trace targets and advantages."""
        L = self._length()
        self._bootstrap(L)
        self.compute_vtrace()

    @torch.no_grad()
    def get_updated_action_log_probs(self) -> torch.Tensor:
        """Re-evaluate the stored actions with the current actor (``algorithm.num_mini_batch``
        unshuffled minibatches) and refresh ``Value[:L]``; returns the new log-probs."""
        L = self._length()
        logp_store, val_store = self.data[K.LOGP], self.data[K.VAL]
        new_logp = torch.empty_like(logp_store[:L]).reshape(L * logp_store.shape[1], -1)
        new_val = torch.empty_like(val_store[:L]).reshape(L * val_store.shape[1], -1)
        num_mb = getattr(self.algo, "num_mini_batch", 1)
        for idx in self._index_plan(num_mb, None, 1, False):
            b = gather(self.data, idx, L, self.recurrent_actor)
            obs, rhs, done = b[K.OBS], b.get(K.RHS), b[K.DONE]
            logp = self.actor.evaluate_actions(obs, rhs, done, b[K.ACT])[0]
            val = self.actor.get_value(obs, rhs, done)["value_net1"]
            flat = idx.reshape(-1)
            new_logp[flat] = logp.reshape(flat.shape[0], -1).to(new_logp.dtype)
            new_val[flat] = val.reshape(flat.shape[0], -1).to(new_val.dtype)
        val_store[:L] = new_val.reshape(val_store[:L].shape)
        return new_logp.reshape(logp_store[:L].shape)

    @torch.no_grad()
    def compute_vtrace(self, clip_rho_thres: float = 1.0, clip_c_thres: float = 1.0) -> None:
        """Store V-trace targets, PG advantages and the updated log-probs (``clip_rho_thres``:
        rho-bar and PG rho-bar; ``clip_c_thres``: c-bar)."""
        L = self._length()
        d = self.data
        target = self.get_updated_action_log_probs()
        v, nv, term, trunc = layout_a(L, d[K.VAL], d[K.DONE], d[K.TRUNC], d[K.FVAL])
        vs, pg = R.vtrace(
            d[K.LOGP][:L].reshape(L, -1),
            target.reshape(L, -1),
            d[K.REW][:L].reshape(L, -1),
            v,
            nv,
            term,
            trunc,
            gamma=self.algo.gamma,
            lam=1.0,
            rho_bar=clip_rho_thres,
            c_bar=clip_c_thres,
            pg_rho_bar=clip_rho_thres,
        )
        d[K.RET][:L] = vs.reshape(d[K.RET][:L].shape).to(d[K.RET].dtype)
        d[K.RET][L] = d[K.VAL][L]
        d[K.LOGP][:L] = target
        self._store_adv(K.ADV, R.normalize_advantages(pg.float(), eps=self._adv_eps))
