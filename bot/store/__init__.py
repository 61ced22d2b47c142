"""Redis-backed state: the webhook delivery log (more stores live beside it)."""

from bot.store.deliveries import (
    OUTCOMES,
    STREAM_KEY,
    DeliveryEntry,
    NewDelivery,
    Outcome,
    StoredDelivery,
    forget_delivery,
    get_delivery,
    recent_deliveries,
    record_delivery,
)

__all__ = [
    "OUTCOMES",
    "STREAM_KEY",
    "DeliveryEntry",
    "NewDelivery",
    "Outcome",
    "StoredDelivery",
    "forget_delivery",
    "get_delivery",
    "recent_deliveries",
    "record_delivery",
]
