import asyncio
import sys
import time


async def crunch(n):
    x = 0
    for _ in range(n):
        x += 1
    return x


async def worker_a(end):
    while time.process_time() < end:
        await crunch(20000)
        await asyncio.sleep(0)


async def worker_b(end):
    while time.process_time() < end:
        await crunch(20000)
        await asyncio.sleep(0)


async def main(secs):
    end = time.process_time() + secs
    print("ready", flush=True)
    await asyncio.gather(worker_a(end), worker_b(end))


asyncio.run(main(float(sys.argv[1])))
