"""A long returns policy placed after the ticket number and customer name."""
from langchain_openai import ChatOpenAI

llm = ChatOpenAI(model="gpt-4o-mini")

RETURNS_POLICY = (
    "Returns are accepted within 30 days of delivery when the item is unused and in its "
    "original packaging. Customers must include the order number and a short reason. Refunds go "
    "back to the original payment method within ten business days after the warehouse inspects "
    "the item. Items marked final sale, gift cards, perishable goods and custom-made products "
    "cannot be returned. If an item arrived damaged, ask for a photo of the damage and the "
    "shipping label, then offer a replacement before a refund. Exchanges for a different size "
    "or colour are free once per order. Shipping costs are refunded only when the return is "
    "caused by our mistake: a wrong item, a defect or damage in transit. For orders shipped "
    "outside the EU, customs duties are not refundable. Never promise a refund amount before "
    "the inspection is complete, and never share another customer's order details. When a "
    "customer is angry, acknowledge the problem, summarise what will happen next and give a "
    "realistic date. Escalate to a supervisor when the order value exceeds 500 euros or the "
    "customer mentions a lawyer, a chargeback or the press."
)


def draft_reply(ticket) -> str:
    prompt = f"Ticket #{ticket.id} from {ticket.customer_name}:\n{ticket.body}\n\n" + RETURNS_POLICY  # expect: PC007
    return llm.invoke(prompt).content
