"""A spider that follows every link of the local site, from the page given as `-a start=URL`."""

from __future__ import annotations

import time
from typing import Any, Iterator

import scrapy


class FollowSpider(scrapy.Spider):
    """`-a think=SECONDS`: each callback first works that long (blocking, as a slow parser
    does)."""

    name = "follow"

    def __init__(self, start: str = "", think: str = "0", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.think = float(think)

    def parse(self, response: Any) -> Iterator[Any]:
        if self.think > 0:
            time.sleep(self.think)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
