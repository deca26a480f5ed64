"""Kernel source text: one definition of a comment serves the guard's lexer and the normalized hash."""

from evokernel.source import lex, normalized_hash, without_comments


def test_comments_and_whitespace_do_not_make_a_new_kernel():
    assert normalized_hash("int a = 1; // one\n") == normalized_hash("int a=1;/* one,\n two */")
    assert normalized_hash("int a = 1;") != normalized_hash("int a = 2;")


def test_a_comment_marker_inside_a_literal_is_code():
    assert without_comments('p("http://a"); // gone\n') == 'p("http://a");  \n'
    assert normalized_hash('p("http://a");') != normalized_hash('p("http://b");')
    assert without_comments("c = '/'; /* gone */ d;") == "c = '/';   d;"


def test_the_guard_and_the_hash_agree_on_where_a_comment_ends():
    source = 'a /* x */ b // y\nc "/* not a comment */" d'
    assert lex(source, "cuda").code.split() == without_comments(source).replace('"/* not a comment */"', '""').split()
