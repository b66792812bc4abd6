"""Example: a Faust app whose stateless agent consumes a share group through kshare.

    pip install 'kshare-sidecar[faust]'
    KSHARE_BROKER=kshare://127.0.0.1:9192 python examples/faust_share_app.py worker --without-web -l info

Start it twice (two workers): they share the group "orders-svc" (the app id), each record goes
to one of them, and a record the agent raises on is RELEASEd and redelivered — to either worker —
with ``delivery_count`` one higher; from the 3rd failing delivery it is REJECTed (archived).

``KSHARE_BROKER`` is a kshare sidecar (on any Kafka) or a native Kafka 4.x broker with share
groups. Optional ``KSHARE_PRODUCER=kafka://backend:9092`` sends what the app produces straight to
the backend instead of through the sidecar. Records must exist before the group starts reading
(or set the group's ``share.auto.offset.reset`` to ``earliest``: ``kshare share-groups`` admin).
"""

from __future__ import annotations

import logging
import os

import faust

BROKER = os.environ.get("KSHARE_BROKER", "kshare://127.0.0.1:9192")
CONSUMER = BROKER + ("&" if "?" in BROKER else "?") + "reject_after=3"  # REJECT from the 3rd failing delivery
brokers = {"broker": CONSUMER}
if os.environ.get("KSHARE_PRODUCER"):
    brokers = {"broker_consumer": CONSUMER, "broker_producer": os.environ["KSHARE_PRODUCER"]}

# topic_disable_leader: Faust's leader election is for consumer-group assignors; share groups
# have no use for it. No tables: share topics are not partition-local (see docs/faust.md).
app = faust.App("orders-svc", **brokers, topic_disable_leader=True, web_enabled=False)


class Order(faust.Record, serializer="json"):
    id: str
    amount: float


orders = app.topic("orders", value_type=Order)
large_orders = app.topic("large-orders", value_type=Order)
log = logging.getLogger("orders-svc")


@app.agent(orders)
async def handle(stream):
    async for order in stream:
        message = faust.current_event().message
        if order.amount < 0:
            # raising RELEASEs the record (redelivered, delivery_count + 1); the agent restarts
            raise ValueError(f"order {order.id}: negative amount (delivery {message.delivery_count})")
        if order.amount > 1000:
            await large_orders.send(key=order.id, value=order)  # the producer side: a normal topic
        log.info("order %s processed (delivery %s)", order.id, message.delivery_count)
        # returning to the loop ACCEPTs it


if __name__ == "__main__":
    app.main()
