"""Subprocess for the Kafka spool crash test: append forever, print each id once acknowledged.

usage: python kafka_spool_writer.py BOOTSTRAP TOPIC SPOOL_PATH
Kafka at BOOTSTRAP is unreachable, so every acknowledgement comes from the fsynced spool.
The parent SIGKILLs this process mid-stream.
"""

import asyncio
import sys

from stream_events import make_event

from streams.kafka.log import KafkaEventLog


async def main(bootstrap: str, topic: str, spool: str) -> None:
    log = KafkaEventLog(bootstrap, spool, requests_topic=topic, scope_topic=topic, config_topic=topic,
                        spool_after_s=0.3, reconnect_backoff_s=0.2)

    def on_ack(future: asyncio.Future, event_id: str) -> None:
        if future.exception() is None:
            print(event_id, future.result(), flush=True)  # printed only after the future resolved

    i = 0
    while True:
        for _ in range(20):
            event = make_event(i, team=f"t{i % 5}")
            log.append(event).add_done_callback(lambda f, eid=event.id: on_ack(f, eid))
            i += 1
        await asyncio.sleep(0.002)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
