"""Errors of the pricing package.

Hierarchy::

    PricingError                 base; a configuration or data problem (HTTP 500
                                 if it ever reaches a caller: it is ours, not theirs)
      PriceVersionConflict       a version would edit history or go backwards
      UnknownPriceVersion        ``PriceBook.get`` of a version never published
      NoPriceInForce             no version was valid at the asked time
      UnknownDeployment          a version has no price for a deployment
      MissingFxRate              the FX table lacks a (from, to, month) rate

All lookups also subclass ``LookupError`` so generic handlers still work.
"""

from __future__ import annotations


class PricingError(Exception):
    """Base of every pricing error."""


class PriceVersionConflict(PricingError):
    pass


class UnknownPriceVersion(PricingError, LookupError):
    pass


class NoPriceInForce(PricingError, LookupError):
    pass


class UnknownDeployment(PricingError, LookupError):
    pass


class MissingFxRate(PricingError, LookupError):
    pass
