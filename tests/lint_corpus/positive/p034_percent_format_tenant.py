"""Old-style % formatting puts the tenant name ahead of shared rules."""
import anthropic

client = anthropic.Anthropic()
SYSTEM = ("Tenant: %s\n"
          "You are a compliance assistant. Answer with references to the policy sections and never "
          "give legal advice.")


def ask(tenant_name: str, question: str):
    return client.messages.create(
        model="claude-haiku-4-5",
        max_tokens=500,
        system=SYSTEM % (tenant_name,),  # expect: PC004
        messages=[{"role": "user", "content": question}],
    )
