"""A Django view: timezone.now() is stored in the database, the prompt is static."""
from django.http import JsonResponse
from django.utils import timezone
from openai import OpenAI

from .models import Question

client = OpenAI()
SYSTEM = "You answer questions about our opening hours and locations."


def ask(request):
    text = request.POST["question"]
    record = Question.objects.create(text=text, asked_at=timezone.now())
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
    )
    record.answer = completion.choices[0].message.content
    record.answered_at = timezone.now()
    record.save()
    return JsonResponse({"answer": record.answer})
