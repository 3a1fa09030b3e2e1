"""Query API: navigation over the event graph, decomposition, answering."""
