"""drop state_imports: the JSON Lines state-file inbox it tracked is gone

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 06:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table('state_imports')


def downgrade() -> None:
    op.create_table('state_imports',
    sa.Column('source', sa.String(length=100), nullable=False),
    sa.Column('offset', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('source')
    )
