"""A spider that fetches its start page, then, each time it falls idle, schedules the same
page again with ``dont_filter=True`` from the ``spider_idle`` signal (no request yielded it),
three times a run: a poll, or a login renewed."""

from __future__ import annotations

from typing import Any, Iterator

import scrapy
from scrapy import signals
from scrapy.exceptions import DontCloseSpider


class PollSpider(scrapy.Spider):
    name = "poll"

    def __init__(self, start: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.polls = 0

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> "PollSpider":
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.idle, signal=signals.spider_idle)
        return spider

    def idle(self) -> None:
        if self.polls < 3:
            self.polls += 1
            request = scrapy.Request(self.start_urls[0], dont_filter=True, callback=self.parse)
            self.crawler.engine.crawl(request)
            raise DontCloseSpider

    def parse(self, response: Any) -> Iterator[Any]:
        return iter(())
