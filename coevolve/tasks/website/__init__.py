"""Website management: change requests against a small CMS behind admin tools.

Services: a CMS with pages (hierarchical slugs, status, body with markdown links, SEO metadata),
redirects, menus (main and footer), a media library, and the report of the last link crawl. Each
instance is one change request: rename a page (with redirects), fix the broken links listed in the
crawl report, or reorganise the main menu. The checker compares the final CMS state with the state
the change request requires and reports per requirement.
"""

from __future__ import annotations

from coevolve.tasks.base import TaskEnv, TaskFamily
from coevolve.tasks.website.checker import check
from coevolve.tasks.website.env import HELPER_TOOLS, TOOLS, WebsiteEnv
from coevolve.tasks.website.plan import plan
from coevolve.tasks.website.world import SiteWorld, build_world
from coevolve.values import Outcome

__all__ = ["WebsiteEnv", "WebsiteFamily"]


class WebsiteFamily(TaskFamily):
    name = "website"
    title = "website management"
    build_world = staticmethod(build_world)
    env_type = WebsiteEnv
    base_tools = TOOLS
    helper_tools = HELPER_TOOLS
    planner = staticmethod(plan)

    def instruction(self, world: SiteWorld, instance_id: str) -> str:
        w = world
        if w.kind == "rename":
            page = w.page(w.rename_id)
            old = w.path(page.id)
            new = old.rsplit("/", 1)[0] + "/" + w.new_slug
            seo = f' Also set its SEO title to "{w.seo_title}".' if w.seo_title else ""
            return (
                f'{w.site} website, change request: rename the page "{page.title}" (now at `{old}`) so that its '
                f"slug becomes `{w.new_slug}` and its URL `{new}`. Keep the old address working with a redirect, "
                f"and update every internal link and menu item that pointed at the old address.{seo} When you are "
                "done, no internal link on the site may be broken. Then call finish."
            )
        if w.kind == "links":
            return (
                f"{w.site} website, change request: the last link crawl found broken internal links (see the link "
                "report). Fix every reported link, wherever it appears, so that it leads to the page it was meant "
                "for (the link text names that page). Change nothing else. Then call finish."
            )
        ops = "\n".join(f"{i + 1}. " + _OP_TEXT[op[0]].format(*op) for i, op in enumerate(w.menu_ops))
        return (
            f"{w.site} website, change request: reorganise the main menu.\n{ops}\n"
            "Keep every other item and its position as it is, and make sure no link in the main menu is broken "
            "afterwards. Then call finish."
        )

    def check(self, env: TaskEnv) -> Outcome:
        """The final CMS state against what the change request requires (read from the full-knowledge plan)."""
        assert isinstance(env, WebsiteEnv)
        return check(env, self.plan(env.instance, self.full_knowledge()))


_OP_TEXT = {  # a menu op's kind (op[0]) -> its line in the instruction, filled with op[1] and op[2]
    "rename": 'Rename the menu item "{1}" to "{2}" (same target).',
    "move_under": 'Move the item "{1}" so that it becomes the last sub-item of "{2}".',
    "remove": 'Remove the item "{1}".',
    "add_under": 'Add the page "{1}" as the last sub-item of "{2}", labelled with the page title.',
    "move_last": 'Move the top-level item "{1}" to the end of the menu.',
}

