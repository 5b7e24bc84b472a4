"""prices.cache_write_1h: the price of one-hour prompt-cache writes (Anthropic), beside the five-minute one

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 07:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('prices') as batch:
        batch.add_column(sa.Column('cache_write_1h', sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('prices') as batch:
        batch.drop_column('cache_write_1h')
