"""A LangGraph graph whose long-term memory is compassmem: every message is stored as a turn through the graph's
store, and a question first recalls the turns that answer it. No LLM: the nodes are plain functions.

    pip install 'compassmem[langchain]'
    python examples/langgraph_memory.py     # memory in ./.compassmem, or where COMPASSMEM_DATA_DIR says

Prints one JSON line per message: what was said, the turns recalled for it (best first, with their namespace,
speaker, score and the event holding them) and how many turns the conversation holds afterwards.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from compassmem import Memory
from compassmem.integrations.langgraph import CompassmemStore
from compassmem.core.logging_setup import configure_logging


@dataclass
class Context:
    user_id: str
    chat_id: str

    @property
    def namespace(self) -> tuple[str, str, str]:
        return ("default", self.user_id, self.chat_id)  # (tenant, subject, conversation)


class State(TypedDict, total=False):
    turn_id: str
    said: str
    recalled: list[dict[str, Any]]


def recall(state: State, runtime: Runtime[Context]) -> State:
    """Before a question is stored, look up what the user said that answers it."""
    if not state["said"].rstrip().endswith("?"):
        return {"recalled": []}
    assert runtime.store is not None
    found = runtime.store.search(runtime.context.namespace, query=state["said"], limit=2)
    return {"recalled": [{"text": item.value["text"], "speaker": item.value["speaker"],
                          "namespace": list(item.namespace), "score": item.score,
                          "event_id": item.value["event_id"]} for item in found]}


def remember(state: State, runtime: Runtime[Context]) -> State:
    assert runtime.store is not None
    runtime.store.put(runtime.context.namespace, state["turn_id"], {"text": state["said"], "speaker": "user"})
    return {}


def build(store: CompassmemStore) -> CompiledStateGraph:
    return (StateGraph(State, context_schema=Context)
            .add_node("recall", recall).add_node("remember", remember)
            .add_edge(START, "recall").add_edge("recall", "remember").add_edge("remember", END)
            .compile(store=store))


def main() -> None:
    configure_logging("WARNING")  # compassmem's log lines on stderr, and only its warnings: stdout is the result
    context = Context(user_id="user-1", chat_id="chat-1")
    messages = ["I'm allergic to peanuts.", "My sister Maya lives in Porto.", "Where does my sister live?"]
    with Memory() as memory:
        store = CompassmemStore(memory)
        graph = build(store)
        for index, said in enumerate(messages, start=1):
            # The turn id makes running the example again replace its turns rather than add more.
            result = graph.invoke({"turn_id": f"m{index}", "said": said}, context=context)
            stored = len(store.search(context.namespace, limit=100))
            print(json.dumps({"said": said, "recalled": result["recalled"], "stored": stored}))


if __name__ == "__main__":
    main()
