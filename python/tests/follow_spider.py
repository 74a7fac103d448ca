"""A spider that follows every link of the local site, from the page given as `-a start=URL`."""

from __future__ import annotations

from typing import Any, Iterator

import scrapy


class FollowSpider(scrapy.Spider):
    name = "follow"

    def __init__(self, start: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start]

    def parse(self, response: Any) -> Iterator[Any]:
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
