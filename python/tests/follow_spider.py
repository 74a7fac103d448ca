"""A spider that follows every link of the local site, from the page given as `-a start=URL`."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Iterator

import scrapy


class FollowSpider(scrapy.Spider):
    """`-a think=SECONDS`: each callback first works that long (blocking, as a slow parser
    does); `-a wait=SECONDS`: each callback first waits that long without blocking (as one
    that awaits another service does), the downloader going on meanwhile."""

    name = "follow"

    def __init__(
        self, start: str = "", think: str = "0", wait: str = "0", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.think = float(think)
        self.wait = float(wait)

    def parse(self, response: Any) -> Any:
        if self.wait > 0:
            return self._after_a_wait(response)
        return self._follow(response)

    def _follow(self, response: Any) -> Iterator[Any]:
        if self.think > 0:
            time.sleep(self.think)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)

    async def _after_a_wait(self, response: Any) -> AsyncIterator[Any]:
        await asyncio.sleep(self.wait)
        for request in self._follow(response):
            yield request
