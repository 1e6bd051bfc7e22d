"""litellm, imported and configured once per process with the project's providers (the testbed's
synthetic models as a custom provider) and the secrets file loaded."""

from __future__ import annotations

import os

from coevolve.services.secrets import ensure_secrets

SYNTHETIC_PROVIDER = "coevolve_synthetic"
_litellm = None


def litellm_lib():
    """Import and configure litellm once (its import takes seconds: keep it off `import coevolve.services`)."""
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        from coevolve.testbed.provider import SyntheticLLM

        litellm.suppress_debug_info = True
        litellm.telemetry = False
        litellm.drop_params = False
        litellm.disable_end_user_cost_tracking = True
        if not any(p.get("provider") == SYNTHETIC_PROVIDER for p in litellm.custom_provider_map):
            litellm.custom_provider_map.append({"provider": SYNTHETIC_PROVIDER, "custom_handler": SyntheticLLM()})
            from litellm.utils import custom_llm_setup

            custom_llm_setup()
        _litellm = litellm
    ensure_secrets()
    return _litellm
