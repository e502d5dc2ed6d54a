#!/usr/bin/python3
"""Renders conversations with a model's chat template the way transformers' apply_chat_template
does (Jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loopcontrols; its
tojson, raise_exception and strftime_now; bos_token and eos_token from tokenizer_config.json),
as the reference for pdserve's Jinja engine.

Usage: render_chat_jinja2.py TOKENIZER_CONFIG.json CONVERSATIONS.json  → a JSON list of prompts
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def token_text(config, key):
    value = config.get(key)
    if isinstance(value, dict):
        return value.get("content")
    return value


def main():
    config = json.load(open(sys.argv[1], encoding="utf-8"))
    conversations = json.load(open(sys.argv[2], encoding="utf-8"))
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    template = env.from_string(config["chat_template"])
    prompts = [template.render(messages=messages, tools=None, documents=None,
                               add_generation_prompt=True,
                               bos_token=token_text(config, "bos_token"),
                               eos_token=token_text(config, "eos_token"))
               for messages in conversations]
    json.dump(prompts, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
