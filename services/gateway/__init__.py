"""``governor gateway``: the OpenAI-compatible request path that obeys admission, FleetOpt and BF-IO documents."""

from services.gateway.app import Gateway
from services.gateway.config import GatewayConfig, StaticUpstream, read_gateway_config
from services.gateway.upstreams import Upstream, UpstreamRegistry

__all__ = ["Gateway", "GatewayConfig", "StaticUpstream", "Upstream", "UpstreamRegistry", "read_gateway_config"]
