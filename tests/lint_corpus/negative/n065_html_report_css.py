"""An LLM app that also renders an HTML report: the page title precedes a long stylesheet."""
from openai import OpenAI

client = OpenAI()
REPORT_CSS = (
    "body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 48rem; line-hei"
    "ght: 1.5; color: #222; } h1 { font-size: 1.6rem; border-bottom: 1px solid #ddd; padding-"
    "bottom: .3rem; } h2 { font-size: 1.3rem; margin-top: 2rem; } h3 { font-size: 1.1rem; } p"
    " { margin: .6rem 0; } table { border-collapse: collapse; width: 100%; } th, td { border:"
    " 1px solid #ccc; padding: .4rem .6rem; } th { background: #f5f5f5; text-align: left; } ."
    "ok { color: #137333; } .bad { color: #a50e0e; } code { background: #f1f3f4; padding: 0 ."
    "2rem; border-radius: 3px; } pre { background: #f8f9fa; padding: 1rem; overflow-x: auto; "
    "} footer { margin-top: 3rem; font-size: .8rem; color: #666; } .tag { display: inline-blo"
    "ck; padding: 0 .4rem; border-radius: 8px; background: #e8f0fe; } blockquote { border-lef"
    "t: 4px solid #ddd; margin: 1rem 0; padding: .2rem 1rem; color: #555; } @media (prefers-c"
    "olor-scheme: dark) { body { background: #121212; color: #eee; } th { background: #222; }"
    " code, pre { background: #1e1e1e; } }"
)


def summarize(text: str) -> str:
    completion = client.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "system", "content": "Summarize the text."}, {"role": "user", "content": text}])
    return completion.choices[0].message.content


def html_report(title: str, text: str) -> str:
    head = f"<html><head><title>{title}</title><style>" + REPORT_CSS + "</style></head>"
    return head + f"<body><h1>{title}</h1><p>{summarize(text)}</p></body></html>"
